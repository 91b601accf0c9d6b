//! Single-thread decode and resize speed on the 43 captioned photos of the test data.
//!
//! ```sh
//! cargo run --release -p zephon-vision --example decode_speed
//! cargo run --release -p zephon-vision --features turbojpeg --example decode_speed
//! ```
//!
//! Photos are read into memory first; each line runs whole passes over all of them for at least
//! `ZEPHON_BENCH_SECS` seconds (default 3). Rates are per CPU second of the benchmark thread
//! (Linux schedstat), so a busy shared machine slows the wall clock, not the figures; Mpx/s
//! counts source pixels (full size). Baseline and progressive photos are reported apart: the
//! corpus' progressive 5640×3172 wallpaper alone is a third of the decode time.

use std::time::{Duration, Instant};

use zephon_vision::normalize::Normalize;
use zephon_vision::patch::{QwenPatching, qwen2_vl_patches};
use zephon_vision::resize::{Filter, Fit, ResizeSpec, decode_resized};
use zephon_vision::{DecodeOptions, JpegBackend, RgbImage, SmartResize, decode, probe};

struct Photo {
    bytes: Vec<u8>,
    mpx: f64,
    progressive: bool,
}

/// Nanoseconds this thread has run on a CPU (Linux `schedstat`), so that other processes on a
/// shared machine do not count; falls back to wall time elsewhere.
fn cpu_ns(start: Instant) -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| start.elapsed().as_nanos() as u64)
}

fn bench(name: &str, photos: &[Photo], min: Duration, mut f: impl FnMut(usize, &Photo) -> usize) {
    // Warm up caches and lazily built tables.
    for (i, p) in photos.iter().enumerate().take(3) {
        std::hint::black_box(f(i, p));
    }
    let origin = Instant::now();
    // [all, baseline, progressive]: (images, Mpx, CPU ns)
    let mut acc = [(0usize, 0.0f64, 0u64); 3];
    let mut passes = 0;
    let t = Instant::now();
    while passes == 0 || t.elapsed() < min {
        for (i, p) in photos.iter().enumerate() {
            let c0 = cpu_ns(origin);
            std::hint::black_box(f(i, p));
            let dt = cpu_ns(origin).saturating_sub(c0);
            for g in [0, 1 + usize::from(p.progressive)] {
                acc[g].0 += 1;
                acc[g].1 += p.mpx;
                acc[g].2 += dt;
            }
        }
        passes += 1;
    }
    let wall = t.elapsed().as_secs_f64();
    let rate = |(n, mpx, ns): (usize, f64, u64)| {
        let s = ns as f64 / 1e9;
        format!("{:6.1} img/s {:6.1} Mpx/s", n as f64 / s, mpx / s)
    };
    println!(
        "{name:55} all {} | baseline {} | progressive {} | wall {:.1} img/s",
        rate(acc[0]),
        rate(acc[1]),
        rate(acc[2]),
        acc[0].0 as f64 / wall
    );
}

fn main() {
    let dir = zephon_testkit::testdata().join("images/captioned/jpg");
    let mut paths: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    let photos: Vec<Photo> = paths
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p).unwrap();
            let i = probe(&bytes).unwrap();
            Photo { mpx: f64::from(i.width) * f64::from(i.height) / 1e6, progressive: i.progressive, bytes }
        })
        .collect();
    let total: f64 = photos.iter().map(|p| p.mpx).sum();
    let mb: usize = photos.iter().map(|p| p.bytes.len()).sum();
    let prog: Vec<&Photo> = photos.iter().filter(|p| p.progressive).collect();
    println!(
        "{} photos ({} progressive, {:.1} of the {:.1} Mpx), {:.1} MB of JPEG; one thread; rates per CPU second \
         of this thread; JPEG backend default {}",
        photos.len(),
        prog.len(),
        prog.iter().map(|p| p.mpx).sum::<f64>(),
        total,
        mb as f64 / 1e6,
        JpegBackend::DEFAULT.name()
    );
    let secs = std::env::var("ZEPHON_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let min = Duration::from_secs_f64(secs);

    let zune = DecodeOptions::new().jpeg_backend(JpegBackend::Zune).unwrap();
    let crop336 = ResizeSpec::fixed(336, 336, Fit::CenterCrop).unwrap();
    let qwen = ResizeSpec::smart(SmartResize::QWEN2_VL).with_filter(Filter::Bicubic);

    bench("zune-jpeg decode", &photos, min, |_, p| decode(&p.bytes, &zune).unwrap().as_raw().len());
    bench("zune-jpeg decode + resize 336 (centre crop, bilinear)", &photos, min, |_, p| {
        decode_resized(&p.bytes, &zune, &crop336, None).unwrap().as_raw().len()
    });
    bench("zune-jpeg decode + Qwen2-VL smart resize + patches (bf16)", &photos, min, |_, p| {
        let img = decode(&p.bytes, &zune).unwrap();
        let r = qwen.apply(&img).unwrap();
        qwen2_vl_patches::<half::bf16>(&r, QwenPatching::QWEN2_VL, &Normalize::CLIP).unwrap().data().len()
    });
    let decoded: Vec<RgbImage> = photos.iter().map(|p| decode(&p.bytes, &zune).unwrap()).collect();
    bench("resize only 336 (centre crop, bilinear), from RGB8", &photos, min, |i, _| {
        crop336.apply(&decoded[i]).unwrap().as_raw().len()
    });

    #[cfg(feature = "turbojpeg")]
    {
        use zephon_vision::PixelLimit;
        use zephon_vision::resize::ReducingGap;
        let turbo = DecodeOptions::new().jpeg_backend(JpegBackend::LibjpegTurbo).unwrap();
        bench("libjpeg-turbo decode", &photos, min, |_, p| decode(&p.bytes, &turbo).unwrap().as_raw().len());
        bench("libjpeg-turbo decode + resize 336", &photos, min, |_, p| {
            decode_resized(&p.bytes, &turbo, &crop336, None).unwrap().as_raw().len()
        });
        bench("libjpeg-turbo DCT-scaled decode (gap 2) + resize 336", &photos, min, |_, p| {
            decode_resized(&p.bytes, &turbo, &crop336, Some(ReducingGap::DEFAULT)).unwrap().as_raw().len()
        });
        let gap1 = ReducingGap::new(1.0).unwrap();
        bench("libjpeg-turbo DCT-scaled decode (gap 1) + resize 336", &photos, min, |_, p| {
            decode_resized(&p.bytes, &turbo, &crop336, Some(gap1)).unwrap().as_raw().len()
        });
        bench("libjpeg-turbo DCT-scaled decode only, 1/8", &photos, min, |_, p| {
            zephon_vision::decode_jpeg_turbo(&p.bytes, PixelLimit::DEFAULT, 8).unwrap().as_raw().len()
        });
        bench("libjpeg-turbo DCT-scaled decode only, 1/2", &photos, min, |_, p| {
            zephon_vision::decode_jpeg_turbo(&p.bytes, PixelLimit::DEFAULT, 2).unwrap().as_raw().len()
        });
    }
    #[cfg(not(feature = "turbojpeg"))]
    println!("(libjpeg-turbo lines: add --features turbojpeg)");
}
