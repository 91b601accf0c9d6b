//! Every file of `images/edge/index.json`, driven by its `expected` field, against Pillow.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use zephon_vision::{DecodeOptions, ErrorKind, decode};

use crate::data::{Oracle, psnr, testdata};

/// Pixels of an `ok` file must be within this PSNR of Pillow's (libjpeg-turbo): decoders differ
/// by IDCT rounding and chroma upsampling, a few levels at most. Below: images too small for a
/// PSNR to mean anything (a 4×4 file where the upsamplers' edge handling decides everything).
const MIN_PSNR_DB: f64 = 30.0;
const MIN_PIXELS_FOR_PSNR: u64 = 64;

/// Outcomes the corpus must produce beyond its `expected` field: the kind of each refusal.
const KINDS: &[(&str, Option<ErrorKind>)] = &[
    ("gen_empty.jpg", Some(ErrorKind::Empty)),
    ("gen_random.jpg", Some(ErrorKind::UnknownFormat)),
    ("gen_sof_65535x65535.jpg", Some(ErrorKind::TooLarge)),
    ("gen_soi_only.jpg", Some(ErrorKind::Truncated)),
    ("gen_trunc_10.jpg", Some(ErrorKind::Truncated)),
    ("gen_trunc_50.jpg", Some(ErrorKind::Truncated)),
    ("gen_trunc_90.jpg", Some(ErrorKind::Truncated)),
    ("gen_trunc_no_eoi.jpg", Some(ErrorKind::Truncated)),
    ("gen_headers_only.jpg", Some(ErrorKind::Truncated)),
    ("pillow_truncated_jpeg.jpg", Some(ErrorKind::Truncated)),
    ("gen_sof_zero_width.jpg", Some(ErrorKind::Corrupt)),
    ("gen_soi_eoi.jpg", Some(ErrorKind::Corrupt)),
    ("gen_abbreviated_no_tables.jpg", Some(ErrorKind::Corrupt)),
    ("libjpeg-turbo_testorig12.jpg", Some(ErrorKind::Unsupported)),
    ("libjpeg-turbo_testimgari.jpg", Some(ErrorKind::Unsupported)),
    // Sniffed as PNG, decoded as one.
    ("gen_png_named_jpg.jpg", None),
    // A too-short Adobe segment is ignored as libjpeg ignores it.
    ("pillow_truncated_app14.jpg", None),
];

#[test]
fn every_edge_file_behaves_as_its_index_says() {
    let Some(td) = testdata("every_edge_file_behaves_as_its_index_says") else { return };
    let dir = td.join("images/edge");
    let index: Value = serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let files = index["files"].as_array().unwrap();
    assert!(files.len() >= 100, "index.json lists {} files", files.len());

    let oracle = Oracle::new(&td);
    let jobs: Vec<Value> = files
        .iter()
        .enumerate()
        .map(|(i, f)| json!({"op": "decode", "src": dir.join(f["file"].as_str().unwrap()), "out": format!("{i}.rgb")}))
        .collect();
    let pillow = oracle.run(&jobs);

    let mut failures = Vec::new();
    let mut table = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let name = f["file"].as_str().unwrap();
        let expected = f["expected"].as_str().unwrap();
        let data = std::fs::read(dir.join(name)).unwrap();
        let t = Instant::now();
        let got = decode(&data, &DecodeOptions::new());
        let took = t.elapsed();
        if took > Duration::from_secs(5) {
            failures.push(format!("{name}: took {took:?}"));
        }
        let outcome = match &got {
            Ok(img) => format!("ok {}x{}", img.width(), img.height()),
            Err(e) => format!("{}: {e}", e.kind()),
        };
        table.push(format!("{expected:8} {name:45} {outcome}"));
        if let Some((_, kind)) = KINDS.iter().find(|(n, _)| *n == name) {
            match (kind, &got) {
                (Some(k), Err(e)) if e.kind() == *k => {}
                (None, Ok(_)) => {}
                _ => failures.push(format!("{name}: expected {kind:?}, got {outcome}")),
            }
        }
        match (expected, &got) {
            ("ok", Ok(img)) => {
                let p = &pillow[i];
                let (pw, ph) = (p["w"].as_u64(), p["h"].as_u64());
                if (pw, ph) != (Some(u64::from(img.width())), Some(u64::from(img.height()))) {
                    failures.push(format!("{name}: {outcome}, Pillow (exif_transpose) {p}"));
                    continue;
                }
                let theirs = oracle.output(&format!("{i}.rgb"));
                let db = psnr(img.as_raw(), &theirs);
                let pixels = u64::from(img.width()) * u64::from(img.height());
                if db < MIN_PSNR_DB && pixels >= MIN_PIXELS_FOR_PSNR {
                    failures.push(format!("{name}: PSNR {db:.1} dB against Pillow"));
                }
                table.last_mut().unwrap().push_str(&format!("  psnr {db:.1}"));
            }
            ("ok", Err(_)) => failures.push(format!("{name}: expected ok, got {outcome}")),
            ("error", Ok(_)) => failures.push(format!("{name}: expected an error, got {outcome}")),
            ("error", Err(_)) | ("lenient", _) => {}
            (other, _) => failures.push(format!("{name}: unknown expectation {other}")),
        }
    }
    eprintln!("{}", table.join("\n"));
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn exif_orientation_matches_pillow_for_all_eight() {
    let Some(td) = testdata("exif_orientation_matches_pillow_for_all_eight") else { return };
    let dir = td.join("images/edge");
    let oracle = Oracle::new(&td);
    let names: Vec<String> = (1..=8)
        .map(|o| if o == 1 { "pillow_hopper.jpg".to_string() } else { format!("pillow_hopper_orientation_{o}.jpg") })
        .collect();
    let jobs: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, n)| json!({"op": "decode", "src": dir.join(n), "out": format!("o{i}.rgb")}))
        .collect();
    oracle.run(&jobs);
    for (i, n) in names.iter().enumerate() {
        let data = std::fs::read(dir.join(n)).unwrap();
        let info = zephon_vision::probe(&data).unwrap();
        assert_eq!(u32::from(info.orientation.exif_value()), i as u32 + 1, "{n}");
        let ours = decode(&data, &DecodeOptions::new()).unwrap();
        let theirs = oracle.output(&format!("o{i}.rgb"));
        let db = psnr(ours.as_raw(), &theirs);
        // A wrong orientation of this photo scores under 15 dB.
        assert!(db > 30.0, "{n}: {db:.1} dB against Pillow's exif_transpose");
        let stored = decode(&data, &DecodeOptions::new().apply_orientation(false)).unwrap();
        assert_eq!(info.orientation.apply(stored), ours);
    }
}
