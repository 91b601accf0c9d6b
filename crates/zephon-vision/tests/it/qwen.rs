//! The Qwen2-VL layout against the HF processor's formula (NumPy, or a pure-Python port of the
//! same reshape/permute) run on a real photo, and the bf16 output against the f32 one.

use half::bf16;
use serde_json::json;
use zephon_vision::normalize::Normalize;
use zephon_vision::patch::{QwenPatching, qwen2_vl_patches};
use zephon_vision::resize::{Filter, ResizeSpec};
use zephon_vision::{DecodeOptions, SmartResize, decode};

use crate::data::{Oracle, testdata};

#[test]
fn qwen2_vl_patches_equal_the_hf_processor_formula_on_a_photo() {
    let Some(td) = testdata("qwen2_vl_patches_equal_the_hf_processor_formula_on_a_photo") else { return };
    let photo = td.join("images/captioned/jpg/sklearn-china.jpg");
    let img = decode(&std::fs::read(&photo).unwrap(), &DecodeOptions::new()).unwrap();
    // A smaller budget than the default keeps the pure-Python reference to a few seconds.
    let rule = SmartResize::new(28, 56 * 56, 256 * 28 * 28).unwrap();
    let resized = ResizeSpec::smart(rule).with_filter(Filter::Bicubic).apply(&img).unwrap();
    assert_eq!(resized.size(), (532, 364), "smart_resize(427, 640, max 256·28²) by hand: 364 × 532");

    let oracle = Oracle::new(&td);
    let rgb_path = oracle.dir().join("resized.rgb");
    std::fs::write(&rgb_path, resized.as_raw()).unwrap();
    let n = Normalize::CLIP;
    let job = json!({"op": "qwen", "rgb": rgb_path, "w": resized.width(), "h": resized.height(), "out": "qwen.f32",
        "patch": 14, "temporal": 2, "merge": 2, "mean": n.mean(), "std": n.std(), "rescale": n.rescale()});
    let result = &oracle.run(&[job])[0];
    assert!(result.get("error").is_none(), "{result}");
    let theirs: Vec<f32> =
        oracle.output("qwen.f32").chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();

    let ours = qwen2_vl_patches::<f32>(&resized, QwenPatching::QWEN2_VL, &n).unwrap();
    assert_eq!(json!(ours.grid_thw()), result["grid"], "grid (t, h, w)");
    // t = 1, h = 364/14 = 26, w = 532/14 = 38.
    assert_eq!(ours.shape(), [26 * 38, 3 * 2 * 14 * 14]);
    assert_eq!(ours.data().len(), theirs.len());
    let mismatches = ours.data().iter().zip(&theirs).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    eprintln!("Qwen2-VL patches: {} elements, reference {}, {mismatches} bit mismatches", theirs.len(), result["impl"]);
    assert_eq!(mismatches, 0, "every f32 equals the reference bit for bit");

    let b = qwen2_vl_patches::<bf16>(&resized, QwenPatching::QWEN2_VL, &n).unwrap();
    assert!(b.data().iter().zip(&theirs).all(|(x, y)| *x == bf16::from_f32(*y)), "bf16 = RNE(f32)");
}
