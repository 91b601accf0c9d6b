//! PNG decode to RGB8 with the `png` crate, after a header check against the pixel limit.

use std::io::Cursor;

use png::{BitDepth, ColorType, Transformations};

use crate::error::{Format, Result, VisionError};
use crate::image::{PixelLimit, RgbImage};

const P: Format = Format::Png;

/// Width and height from the IHDR chunk.
pub(crate) fn read_size(data: &[u8]) -> Result<(u32, u32)> {
    let mut dec = png::Decoder::new(Cursor::new(data));
    let info = dec.read_header_info().map_err(map_err)?;
    Ok((info.width, info.height))
}

/// Decodes the (first frame of the) image to RGB8, like Pillow's `convert("RGB")`: grey is
/// replicated, a palette expanded, alpha dropped (not composited), 16-bit samples keep their
/// high byte. (Pillow opens 16-bit grey as mode `I;16` and clips it to 255 when converting, a
/// white image; the high byte is the picture.)
pub(crate) fn decode(data: &[u8], limit: PixelLimit) -> Result<RgbImage> {
    let mut dec = png::Decoder::new(Cursor::new(data));
    dec.set_transformations(Transformations::EXPAND | Transformations::STRIP_16);
    dec.set_ignore_text_chunk(true);
    dec.set_ignore_iccp_chunk(true);
    let info = dec.read_header_info().map_err(map_err)?;
    let (width, height) = (info.width, info.height);
    if width == 0 || height == 0 {
        return Err(VisionError::corrupt(P, format!("image size {width}x{height}")));
    }
    limit.check(width, height)?;
    let mut reader = dec.read_info().map_err(map_err)?;
    let (color, depth) = reader.output_color_type();
    if depth != BitDepth::Eight {
        return Err(VisionError::unsupported(P, format!("output bit depth {depth:?} after expansion")));
    }
    let size = reader.output_buffer_size().ok_or_else(|| VisionError::corrupt(P, "frame size overflows"))?;
    let mut buf = vec![0u8; size];
    let frame = reader.next_frame(&mut buf).map_err(map_err)?;
    let (w, h) = (frame.width, frame.height);
    if (w, h) != (width, height) {
        // An APNG whose default image is not the first frame: the first frame may be smaller.
        return Err(VisionError::unsupported(P, format!("first animation frame {w}x{h} differs from the image")));
    }
    let px = (w as usize) * (h as usize);
    let rows = buf.chunks(frame.line_size).take(h as usize);
    let channels = match color {
        ColorType::Grayscale => 1,
        ColorType::GrayscaleAlpha => 2,
        ColorType::Rgb => 3,
        ColorType::Rgba => 4,
        ColorType::Indexed => return Err(VisionError::corrupt(P, "palette not expanded")),
    };
    let mut rgb = Vec::with_capacity(px * 3);
    for row in rows {
        let row = row.get(..w as usize * channels).ok_or_else(|| VisionError::corrupt(P, "short row"))?;
        match channels {
            3 => rgb.extend_from_slice(row),
            1 => row.iter().for_each(|&g| rgb.extend_from_slice(&[g, g, g])),
            2 => row.chunks_exact(2).for_each(|p| rgb.extend_from_slice(&[p[0], p[0], p[0]])),
            _ => row.chunks_exact(4).for_each(|p| rgb.extend_from_slice(&p[..3])),
        }
    }
    RgbImage::new(w, h, rgb).map_err(|_| VisionError::corrupt(P, "decoded size does not match the header"))
}

fn map_err(e: png::DecodingError) -> VisionError {
    match e {
        png::DecodingError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            VisionError::truncated(P, "data ends before the image does")
        }
        png::DecodingError::LimitsExceeded => VisionError::corrupt(P, "metadata exceeds the decoder's memory limit"),
        other => VisionError::corrupt(P, other.to_string()),
    }
}
