//! Any bytes as an image: probe, decode (EXIF orientation, pixel limit, truncation checks)
//! and resize to a fixed and a dynamic size. An error or an image, never a panic, a hang, or an
//! allocation the header claims beyond the limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zephon_vision::resize::{Fit, ResizeSpec, decode_resized};
use zephon_vision::{DecodeOptions, PixelLimit, SmartResize, probe};

fuzz_target!(|data: &[u8]| {
    let _ = probe(data);
    let Ok(limit) = PixelLimit::new(1 << 22) else { return };
    let opts = DecodeOptions::new().limit(limit);
    if let Ok(fixed) = ResizeSpec::fixed(32, 32, Fit::CenterCrop) {
        let _ = decode_resized(data, &opts, &fixed, None);
    }
    let _ = decode_resized(data, &opts, &ResizeSpec::smart(SmartResize::QWEN2_VL), None);
});
