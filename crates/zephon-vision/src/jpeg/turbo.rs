//! libjpeg-turbo decode (feature `turbojpeg`): full size or scaled by 1/2, 1/4, 1/8 inside the
//! IDCT, which skips most of the work when the target is much smaller than the photo.

use std::panic::{AssertUnwindSafe, catch_unwind};

use turbojpeg::{Decompressor, Image, PixelFormat, ScalingFactor};

use super::Header;
use crate::error::{Format, Result, VisionError};
use crate::image::RgbImage;

const J: Format = Format::Jpeg;

/// The largest of 8, 4, 2 that keeps a `width × height` image at least `min` in both sides.
pub(super) fn denominator(width: u32, height: u32, min: (u32, u32)) -> Option<u8> {
    [8u8, 4, 2].into_iter().find(|&d| {
        let d32 = u32::from(d);
        width.div_ceil(d32) >= min.0.max(1) && height.div_ceil(d32) >= min.1.max(1)
    })
}

/// Decodes at 1/`denom` size (1, 2, 4 or 8); sides round up like libjpeg's.
pub(super) fn decode(stream: &[u8], header: &Header, denom: u8) -> Result<RgbImage> {
    let d = u32::from(denom);
    let (w, h) = (header.width.div_ceil(d), header.height.div_ceil(d));
    // libjpeg-turbo writes CMYK and YCCK files only as CMYK pixels.
    let cmyk = header.components == 4;
    let format = if cmyk { PixelFormat::CMYK } else { PixelFormat::RGB };
    let (wu, hu) = (w as usize, h as usize);
    let mut pixels = vec![0u8; wu * hu * format.size()];
    // A fresh decompressor per image: libjpeg keeps Huffman and quantisation tables across
    // images in one handle, and an abbreviated stream would silently borrow the previous
    // image's. Setting one up costs microseconds.
    let mut dec = Decompressor::new().map_err(map_err)?;
    dec.set_scaling_factor(ScalingFactor::new(1, usize::from(denom))).map_err(map_err)?;
    let image = Image { pixels: &mut pixels[..], width: wu, pitch: wu * format.size(), height: hu, format };
    // libjpeg-turbo reports corrupt entropy data as a warning after filling the damage with
    // grey; TurboJPEG turns warnings into errors, which is the strictness wanted here.
    catch_unwind(AssertUnwindSafe(|| dec.decompress(stream, image)))
        .map_err(|_| VisionError::corrupt(J, "the decoder panicked on this data"))?
        .map_err(map_err)?;
    let rgb = if cmyk { super::cmyk_to_rgb(&pixels) } else { pixels };
    RgbImage::new(w, h, rgb).map_err(|_| VisionError::corrupt(J, "decoded size does not match the header"))
}

fn map_err(e: turbojpeg::Error) -> VisionError {
    let msg = e.to_string();
    if msg.contains("Premature end") { VisionError::truncated(J, msg) } else { VisionError::corrupt(J, msg) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn denominator_keeps_the_minimum() {
        assert_eq!(super::denominator(5640, 3172, (672, 378)), Some(8));
        assert_eq!(super::denominator(5640, 3172, (706, 10)), Some(4));
        assert_eq!(super::denominator(1000, 1000, (600, 600)), None);
        assert_eq!(super::denominator(1000, 1000, (500, 1)), Some(2));
        assert_eq!(super::denominator(9, 9, (0, 0)), Some(8));
    }
}
