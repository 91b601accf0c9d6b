//! JPEG decode: the marker walk proves the stream whole, then zune-jpeg (strict) or, with the
//! `turbojpeg` feature and a reduced-scale request, libjpeg-turbo decodes the pixels.

pub(crate) mod markers;
#[cfg(feature = "turbojpeg")]
mod turbo;

use std::panic::{AssertUnwindSafe, catch_unwind};

use zune_jpeg::JpegDecoder;
use zune_jpeg::errors::DecodeErrors;
use zune_jpeg::zune_core::bytestream::ZCursor;
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;

use crate::error::{Format, Result, VisionError};
use crate::image::{PixelLimit, RgbImage};
pub(crate) use markers::Header;

const J: Format = Format::Jpeg;

/// Stored-orientation pixels and the header they came from.
pub(crate) struct Decoded {
    pub image: RgbImage,
    pub header: Header,
}

/// A reduced-scale decode request: the smallest size the caller can use.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "turbojpeg"), allow(dead_code))]
pub(crate) struct Reduce {
    pub size: (u32, u32),
    /// `size` is in display orientation (the EXIF orientation will be applied).
    pub display: bool,
}

/// Which library decodes JPEG pixels (the marker walk in front is always this crate's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JpegBackend {
    /// zune-jpeg, pure Rust, always built.
    Zune,
    /// libjpeg-turbo 3.1 through the `turbojpeg` crate (feature `turbojpeg`): faster, and the
    /// only one that can decode at 1/2, 1/4, 1/8 scale.
    LibjpegTurbo,
}

impl JpegBackend {
    /// libjpeg-turbo when built with the `turbojpeg` feature, else zune-jpeg.
    pub const DEFAULT: JpegBackend =
        if cfg!(feature = "turbojpeg") { JpegBackend::LibjpegTurbo } else { JpegBackend::Zune };

    /// Whether this build can use it.
    pub fn is_available(self) -> bool {
        match self {
            JpegBackend::Zune => true,
            JpegBackend::LibjpegTurbo => cfg!(feature = "turbojpeg"),
        }
    }

    /// A stable name, for run fingerprints (the backends' pixels differ by IDCT rounding).
    pub fn name(self) -> &'static str {
        match self {
            JpegBackend::Zune => "zune-jpeg-0.5.15",
            JpegBackend::LibjpegTurbo => "libjpeg-turbo-3.1",
        }
    }
}

impl Default for JpegBackend {
    fn default() -> Self {
        JpegBackend::DEFAULT
    }
}

/// Decodes with `backend` at full size, or at 1/`2^k` size (k ≤ 3) when libjpeg-turbo is built
/// in and `reduce` allows it (a reduced decode always uses libjpeg-turbo).
pub(crate) fn decode(data: &[u8], limit: PixelLimit, backend: JpegBackend, reduce: Option<Reduce>) -> Result<Decoded> {
    let layout = markers::walk(data, |h| limit.check(h.width, h.height))?;
    let stream = layout.stream(data);
    let header = layout.header;
    #[cfg(feature = "turbojpeg")]
    {
        let denom = reduce.and_then(|r| {
            let swap = r.display && header.orientation.is_some_and(|o| o.swaps_sides());
            let min = if swap { (r.size.1, r.size.0) } else { r.size };
            turbo::denominator(header.width, header.height, min)
        });
        if denom.is_some() || backend == JpegBackend::LibjpegTurbo {
            let image = turbo::decode(&stream, &header, denom.unwrap_or(1))?;
            return Ok(Decoded { image, header });
        }
    }
    #[cfg(not(feature = "turbojpeg"))]
    {
        let _ = reduce;
        if backend == JpegBackend::LibjpegTurbo {
            return Err(VisionError::invalid("libjpeg-turbo backend: built without the `turbojpeg` feature"));
        }
    }
    let image = decode_zune(&stream, &header)?;
    Ok(Decoded { image, header })
}

/// Decode with libjpeg-turbo at 1/`denom` (1, 2, 4, 8), for comparisons and benches.
#[cfg(feature = "turbojpeg")]
pub(crate) fn decode_turbo(data: &[u8], limit: PixelLimit, denom: u8) -> Result<Decoded> {
    let layout = markers::walk(data, |h| limit.check(h.width, h.height))?;
    let stream = layout.stream(data);
    let header = layout.header;
    let image = turbo::decode(&stream, &header, denom)?;
    Ok(Decoded { image, header })
}

fn decode_zune(stream: &[u8], header: &Header) -> Result<RgbImage> {
    let (w, h) = (header.width, header.height);
    // Strict mode turns zune-jpeg's silent recoveries (grey rows after corrupt or missing
    // entropy data) into errors; the junk between segments that strict mode also refuses was
    // already cut out of `stream` by the marker walk.
    let options = DecoderOptions::new_fast()
        .set_strict_mode(true)
        .set_max_width(w as usize)
        .set_max_height(h as usize)
        .jpeg_set_out_colorspace(ColorSpace::RGB);
    // A panic inside a third-party decoder on hostile bytes becomes an error for this image,
    // not a dead worker.
    let pixels = catch_unwind(AssertUnwindSafe(|| -> Result<Vec<u8>> {
        let mut dec = JpegDecoder::new_with_options(ZCursor::new(stream), options);
        dec.decode_headers().map_err(map_zune)?;
        match dec.dimensions() {
            Some((dw, dh)) if (dw, dh) == (w as usize, h as usize) => {}
            other => return Err(VisionError::corrupt(J, format!("decoder sees size {other:?}, header {w}x{h}"))),
        }
        let size = dec.output_buffer_size().ok_or_else(|| VisionError::corrupt(J, "no output size"))?;
        let mut out = vec![0u8; size];
        dec.decode_into(&mut out).map_err(map_zune)?;
        Ok(out)
    }))
    .map_err(|_| VisionError::corrupt(J, "the decoder panicked on this data"))??;
    RgbImage::new(w, h, pixels).map_err(|_| VisionError::corrupt(J, "decoded size does not match the header"))
}

fn map_zune(e: DecodeErrors) -> VisionError {
    match e {
        DecodeErrors::ExhaustedData => {
            VisionError::truncated(J, "entropy-coded data ends before the last block (decoder ran out of data)")
        }
        DecodeErrors::Unsupported(s) => VisionError::unsupported(J, format!("{s:?}")),
        DecodeErrors::IoErrors(io) => VisionError::truncated(J, format!("{io:?}")),
        other => {
            let msg = other.to_string();
            if msg.contains("Premature end") { VisionError::truncated(J, msg) } else { VisionError::corrupt(J, msg) }
        }
    }
}

/// Pillow's CMYK to RGB for a JPEG: Pillow reads CMYK JPEGs as inverted (Adobe convention,
/// rawmode `CMYK;I`), then `convert("RGB")` computes `(255-C')(255-K')/255` on the inverted
/// values, which is `C·K/255` on the stored ones, rounded as Pillow's `MULDIV255`.
#[cfg(any(feature = "turbojpeg", test))]
pub(crate) fn cmyk_to_rgb(cmyk: &[u8]) -> Vec<u8> {
    fn muldiv255(a: u8, b: u8) -> u8 {
        let t = u32::from(a) * u32::from(b) + 128;
        (((t >> 8) + t) >> 8) as u8
    }
    let mut out = Vec::with_capacity(cmyk.len() / 4 * 3);
    for p in cmyk.chunks_exact(4) {
        let k = p[3];
        out.extend_from_slice(&[muldiv255(p[0], k), muldiv255(p[1], k), muldiv255(p[2], k)]);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn cmyk_to_rgb_is_exact_rounding() {
        for c in 0..=255u8 {
            for k in 0..=255u8 {
                let got = super::cmyk_to_rgb(&[c, 0, 0, k])[0];
                let want = ((f64::from(c) * f64::from(k)) / 255.0).round() as u8;
                assert_eq!(got, want, "c={c} k={k}");
            }
        }
    }
}
