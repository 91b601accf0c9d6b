//! Decode + resize of every captioned photo against Pillow at the same size and filter.

use serde_json::{Value, json};
use zephon_vision::resize::{Filter, Fit, ResizeSpec, mean_fill};
use zephon_vision::{DecodeOptions, SmartResize, decode};

use crate::data::{Oracle, captioned, psnr, testdata};

/// The bar for "the same picture": JPEG decoders differ by IDCT rounding and chroma upsampling,
/// resizers by one level of rounding (Pillow filters rows first, fast_image_resize columns first
/// for u8).
const MIN_PSNR_DB: f64 = 40.0;

struct Case {
    name: &'static str,
    spec: ResizeSpec,
    job: Value,
}

fn cases() -> Vec<Case> {
    let fill = mean_fill([0.48145466, 0.4578275, 0.40821073]);
    let q = SmartResize::QWEN2_VL;
    vec![
        Case {
            name: "336 centre crop, bilinear (CLIP processor geometry)",
            spec: ResizeSpec::fixed(336, 336, Fit::CenterCrop).unwrap(),
            job: json!({"mode": "center_crop", "w": 336, "h": 336, "filter": "bilinear"}),
        },
        Case {
            name: "336 stretch, bilinear",
            spec: ResizeSpec::fixed(336, 336, Fit::Stretch).unwrap(),
            job: json!({"mode": "stretch", "w": 336, "h": 336, "filter": "bilinear"}),
        },
        Case {
            name: "336 pad to square (LLaVA), bicubic",
            spec: ResizeSpec::fixed(336, 336, Fit::PadToSquare { fill }).unwrap().with_filter(Filter::Bicubic),
            job: json!({"mode": "pad_square", "w": 336, "h": 336, "filter": "bicubic", "fill": fill}),
        },
        Case {
            name: "Qwen2-VL smart resize (28, 56², 28²·1280), bicubic",
            spec: ResizeSpec::smart(q).with_filter(Filter::Bicubic),
            job: json!({"mode": "smart", "filter": "bicubic", "factor": 28, "min_pixels": q.min_pixels(),
                        "max_pixels": q.max_pixels()}),
        },
        Case {
            name: "224 centre crop, lanczos3",
            spec: ResizeSpec::fixed(224, 224, Fit::CenterCrop).unwrap().with_filter(Filter::Lanczos3),
            job: json!({"mode": "center_crop", "w": 224, "h": 224, "filter": "lanczos"}),
        },
    ]
}

#[test]
fn decode_and_resize_match_pillow_on_every_captioned_photo() {
    let Some(td) = testdata("decode_and_resize_match_pillow_on_every_captioned_photo") else { return };
    let photos = captioned(&td);
    let oracle = Oracle::new(&td);
    let cases = cases();
    let mut jobs = Vec::new();
    for (pi, p) in photos.iter().enumerate() {
        for (ci, c) in cases.iter().enumerate() {
            let mut j = c.job.clone();
            j["op"] = json!("resize");
            j["src"] = json!(p);
            j["out"] = json!(format!("{pi}-{ci}.rgb"));
            jobs.push(j);
        }
    }
    let results = oracle.run(&jobs);
    let mut failures = Vec::new();
    let mut worst = vec![f64::INFINITY; cases.len()];
    for (pi, p) in photos.iter().enumerate() {
        let img = decode(&std::fs::read(p).unwrap(), &DecodeOptions::new()).unwrap();
        let name = p.file_name().unwrap().to_string_lossy();
        for (ci, c) in cases.iter().enumerate() {
            let ours = c.spec.apply(&img).unwrap();
            let r = &results[pi * cases.len() + ci];
            let size = (r["w"].as_u64().unwrap_or(0) as u32, r["h"].as_u64().unwrap_or(0) as u32);
            if size != ours.size() {
                failures.push(format!("{name} / {}: ours {:?}, Pillow {r}", c.name, ours.size()));
                continue;
            }
            let db = psnr(ours.as_raw(), &oracle.output(&format!("{pi}-{ci}.rgb")));
            worst[ci] = worst[ci].min(db);
            if db < MIN_PSNR_DB {
                failures.push(format!("{name} / {}: PSNR {db:.2} dB", c.name));
            }
        }
    }
    for (c, w) in cases.iter().zip(&worst) {
        eprintln!("{:55} worst PSNR over {} photos: {w:.2} dB", c.name, photos.len());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn full_resolution_decode_matches_pillow_on_the_smaller_photos() {
    let Some(td) = testdata("full_resolution_decode_matches_pillow_on_the_smaller_photos") else { return };
    // Photos up to 2 Mpx (the wallpapers would write ~300 MB of reference pixels).
    let photos: Vec<_> = captioned(&td)
        .into_iter()
        .filter(|p| {
            let info = zephon_vision::probe(&std::fs::read(p).unwrap()).unwrap();
            u64::from(info.width) * u64::from(info.height) <= 2_000_000
        })
        .collect();
    assert!(photos.len() >= 20, "{} small photos", photos.len());
    let oracle = Oracle::new(&td);
    let jobs: Vec<Value> =
        photos.iter().enumerate().map(|(i, p)| json!({"op": "decode", "src": p, "out": format!("{i}.rgb")})).collect();
    oracle.run(&jobs);
    let mut worst = f64::INFINITY;
    for (i, p) in photos.iter().enumerate() {
        let ours = decode(&std::fs::read(p).unwrap(), &DecodeOptions::new()).unwrap();
        let theirs = oracle.output(&format!("{i}.rgb"));
        assert_eq!(ours.as_raw().len(), theirs.len(), "{}", p.display());
        let db = psnr(ours.as_raw(), &theirs);
        worst = worst.min(db);
        assert!(db >= 36.0, "{}: {db:.2} dB", p.display());
    }
    eprintln!("full-resolution decode, {} photos: worst PSNR {worst:.2} dB against Pillow", photos.len());
}
