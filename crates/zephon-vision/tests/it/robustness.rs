//! Damaged real files: every cut of the stream is refused, random damage never panics or hangs.

use std::time::{Duration, Instant};

use zephon_vision::{DecodeOptions, ErrorKind, PixelLimit, decode, probe};

use crate::data::testdata;

fn photo(td: &std::path::Path, name: &str) -> Vec<u8> {
    std::fs::read(td.join("images/captioned/jpg").join(name)).unwrap()
}

#[test]
fn every_cut_of_a_jpeg_is_an_error_never_a_grey_image() {
    let Some(td) = testdata("every_cut_of_a_jpeg_is_an_error_never_a_grey_image") else { return };
    // One baseline and one progressive photo.
    for name in ["sklearn-flower.jpg", "caer-black_cat.jpg"] {
        let data = photo(&td, name);
        let info = probe(&data).unwrap();
        let full = decode(&data, &DecodeOptions::new()).unwrap();
        assert_eq!(full.size(), info.display_size());
        let mut kinds = std::collections::BTreeMap::new();
        // 200 cuts spread over the file, plus the last bytes one by one.
        let cuts = (1..200).map(|i| data.len() * i / 200).chain(data.len() - 4..data.len());
        for cut in cuts {
            let err = decode(&data[..cut], &DecodeOptions::new()).expect_err("a cut file decoded");
            *kinds.entry(err.kind()).or_insert(0) += 1;
            assert!(matches!(err.kind(), ErrorKind::Truncated | ErrorKind::Corrupt), "{name} cut at {cut}: {err}");
        }
        eprintln!("{name} (progressive: {}): cuts refused as {kinds:?}", info.progressive);
    }
}

#[test]
fn random_damage_never_panics_or_hangs() {
    let Some(td) = testdata("random_damage_never_panics_or_hangs") else { return };
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut outcomes = std::collections::BTreeMap::new();
    let mut slowest = Duration::ZERO;
    for name in ["sklearn-china.jpg", "caer-puppy.jpg", "stdlib-nagasaki-boats.jpg"] {
        let clean = photo(&td, name);
        for _ in 0..150 {
            let mut data = clean.clone();
            // Flip 1..16 bits anywhere, sometimes overwrite a run with 0xFF (fake markers).
            for _ in 0..1 + next() % 16 {
                let at = (next() % data.len() as u64) as usize;
                data[at] ^= 1 << (next() % 8);
            }
            if next() % 4 == 0 {
                let at = (next() % data.len() as u64) as usize;
                let end = (at + 1 + (next() % 8) as usize).min(data.len());
                data[at..end].fill(0xFF);
            }
            let t = Instant::now();
            let r = decode(&data, &DecodeOptions::new());
            slowest = slowest.max(t.elapsed());
            let key = match r {
                Ok(_) => "ok".to_string(),
                Err(e) => e.kind().to_string(),
            };
            *outcomes.entry(key).or_insert(0) += 1;
        }
    }
    eprintln!("450 damaged photos: {outcomes:?}, slowest {slowest:?}");
    assert!(slowest < Duration::from_secs(5), "a damaged file took {slowest:?}");
}

#[test]
fn the_pixel_limit_refuses_before_decoding() {
    let Some(td) = testdata("the_pixel_limit_refuses_before_decoding") else { return };
    let data = photo(&td, "mate-Elephants_5640x3172.jpg");
    let info = probe(&data).unwrap();
    assert_eq!((info.width, info.height), (5640, 3172));
    let limit = PixelLimit::new(5640 * 3172 - 1).unwrap();
    let t = Instant::now();
    let err = decode(&data, &DecodeOptions::new().limit(limit)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TooLarge);
    assert!(err.to_string().contains("5640x3172"), "{err}");
    // Refused from the header: far faster than the ~0.1 s decode.
    eprintln!("refused in {:?}", t.elapsed());
    assert!(decode(&data, &DecodeOptions::new().limit(PixelLimit::new(5640 * 3172).unwrap())).is_ok());
}

#[test]
fn png_decodes_and_cut_png_is_truncated() {
    let Some(td) = testdata("png_decodes_and_cut_png_is_truncated") else { return };
    let data = std::fs::read(td.join("images/edge/gen_png_named_jpg.jpg")).unwrap();
    let img = decode(&data, &DecodeOptions::new()).unwrap();
    assert_eq!(img.size(), (256, 192));
    for cut in [8, 20, 40, data.len() / 2, data.len() - 13] {
        let err = decode(&data[..cut], &DecodeOptions::new()).unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Truncated | ErrorKind::Corrupt), "cut {cut}: {err}");
    }
    assert_eq!(
        decode(&data, &DecodeOptions::new().limit(PixelLimit::new(1000).unwrap())).unwrap_err().kind(),
        ErrorKind::TooLarge
    );
}
