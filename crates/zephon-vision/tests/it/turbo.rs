//! The `turbojpeg` feature: libjpeg-turbo against zune-jpeg and Pillow, and reduced-scale decode.

use serde_json::{Value, json};
use zephon_vision::resize::{Fit, ReducingGap, ResizeSpec, decode_resized};
use zephon_vision::{DecodeOptions, JpegBackend, PixelLimit, decode, decode_jpeg_turbo, probe};

use crate::data::{Oracle, captioned, psnr, testdata};

fn zune() -> DecodeOptions {
    DecodeOptions::new().jpeg_backend(JpegBackend::Zune).unwrap()
}

#[test]
fn libjpeg_turbo_matches_pillow_and_zune() {
    let Some(td) = testdata("libjpeg_turbo_matches_pillow_and_zune") else { return };
    let photos: Vec<_> = captioned(&td)
        .into_iter()
        .filter(|p| {
            let i = probe(&std::fs::read(p).unwrap()).unwrap();
            u64::from(i.width) * u64::from(i.height) <= 2_000_000
        })
        .collect();
    let oracle = Oracle::new(&td);
    let jobs: Vec<Value> =
        photos.iter().enumerate().map(|(i, p)| json!({"op": "decode", "src": p, "out": format!("{i}.rgb")})).collect();
    oracle.run(&jobs);
    let (mut vs_pillow, mut vs_zune) = (f64::INFINITY, f64::INFINITY);
    for (i, p) in photos.iter().enumerate() {
        let data = std::fs::read(p).unwrap();
        let turbo = decode(&data, &DecodeOptions::new().jpeg_backend(JpegBackend::LibjpegTurbo).unwrap()).unwrap();
        let z = decode(&data, &zune()).unwrap();
        vs_pillow = vs_pillow.min(psnr(turbo.as_raw(), &oracle.output(&format!("{i}.rgb"))));
        vs_zune = vs_zune.min(psnr(turbo.as_raw(), z.as_raw()));
    }
    eprintln!(
        "libjpeg-turbo on {} photos: worst PSNR {vs_pillow:.1} dB vs Pillow, {vs_zune:.1} dB vs zune",
        photos.len()
    );
    assert!(vs_pillow >= 45.0 && vs_zune >= 40.0);
}

#[test]
fn no_tables_leak_from_one_image_to_the_next() {
    let Some(td) = testdata("no_tables_leak_from_one_image_to_the_next") else { return };
    let dir = td.join("images/edge");
    let base = std::fs::read(dir.join("gen_base.jpg")).unwrap();
    let abbreviated = std::fs::read(dir.join("gen_abbreviated_no_tables.jpg")).unwrap();
    let turbo = DecodeOptions::new().jpeg_backend(JpegBackend::LibjpegTurbo).unwrap();
    // libjpeg keeps tables in a handle across images: after gen_base, the table-less stream
    // would decode with its tables if a handle were reused.
    assert!(decode(&base, &turbo).is_ok());
    assert!(decode(&abbreviated, &turbo).is_err());
}

#[test]
fn dct_scaled_decode_sizes_and_quality() {
    let Some(td) = testdata("dct_scaled_decode_sizes_and_quality") else { return };
    let data = std::fs::read(td.join("images/captioned/jpg/mate-Elephants_5640x3172.jpg")).unwrap();
    for (denom, size) in [(1, (5640, 3172)), (2, (2820, 1586)), (4, (1410, 793)), (8, (705, 397))] {
        let img = decode_jpeg_turbo(&data, PixelLimit::DEFAULT, denom).unwrap();
        assert_eq!(img.size(), size, "1/{denom}");
    }
    assert!(decode_jpeg_turbo(&data, PixelLimit::DEFAULT, 3).is_err());

    // Reduced decode then resize, against the full decode then resize, on every photo.
    let spec = ResizeSpec::fixed(336, 336, Fit::CenterCrop).unwrap();
    let gaps = [ReducingGap::DEFAULT, ReducingGap::new(1.0).unwrap()];
    let mut worst = [f64::INFINITY; 2];
    for p in captioned(&td) {
        let data = std::fs::read(&p).unwrap();
        let full = decode_resized(&data, &zune(), &spec, None).unwrap();
        for (g, gap) in gaps.iter().enumerate() {
            let fast = decode_resized(&data, &DecodeOptions::new(), &spec, Some(*gap)).unwrap();
            assert_eq!(fast.size(), (336, 336));
            worst[g] = worst[g].min(psnr(full.as_raw(), fast.as_raw()));
        }
    }
    eprintln!(
        "DCT-scaled then 336 centre crop vs full decode: worst PSNR {:.1} dB (gap 2), {:.1} dB (gap 1)",
        worst[0], worst[1]
    );
    assert!(worst[0] >= 35.0 && worst[1] >= 30.0, "{worst:?}");
}
