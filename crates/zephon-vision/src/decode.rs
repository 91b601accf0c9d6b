//! Format sniffing, header probing and decoding to display-oriented RGB8.

use crate::error::{Format, Result, VisionError};
use crate::image::{PixelLimit, RgbImage};
use crate::jpeg::JpegBackend;
use crate::orientation::Orientation;
use crate::{jpeg, png};

/// How to decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecodeOptions {
    limit: PixelLimit,
    keep_stored_orientation: bool,
    min_size: Option<(u32, u32)>,
    backend: JpegBackend,
}

impl DecodeOptions {
    /// The defaults: [`PixelLimit::DEFAULT`], EXIF orientation applied, full size,
    /// [`JpegBackend::DEFAULT`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Refuse images whose header declares more pixels than `limit`.
    pub fn limit(mut self, limit: PixelLimit) -> Self {
        self.limit = limit;
        self
    }

    /// Whether to apply the EXIF orientation (default `true`, like `ImageOps.exif_transpose`).
    pub fn apply_orientation(mut self, yes: bool) -> Self {
        self.keep_stored_orientation = !yes;
        self
    }

    /// Allows a reduced-scale JPEG decode (1/2, 1/4 or 1/8, in the DCT domain) as long as the
    /// result keeps at least `width × height` (display orientation). Only the `turbojpeg`
    /// feature can reduce; without it, and for PNG, the image comes at full size. The pixels of
    /// a reduced decode differ from a resized full decode (libjpeg's scaled IDCT is its own
    /// filter), so keep this off where outputs must match across builds.
    pub fn min_size(mut self, width: u32, height: u32) -> Self {
        self.min_size = Some((width, height));
        self
    }

    /// Which library decodes JPEG pixels; refuses one this build lacks.
    pub fn jpeg_backend(mut self, backend: JpegBackend) -> Result<Self> {
        if !backend.is_available() {
            return Err(VisionError::invalid(format!(
                "JPEG backend {}: not built in (cargo feature `turbojpeg`)",
                backend.name()
            )));
        }
        self.backend = backend;
        Ok(self)
    }

    /// The JPEG backend in force.
    pub fn backend(&self) -> JpegBackend {
        self.backend
    }

    /// Whether the EXIF orientation is applied.
    pub fn applies_orientation(&self) -> bool {
        !self.keep_stored_orientation
    }

    /// The pixel limit in force.
    pub fn pixel_limit(&self) -> PixelLimit {
        self.limit
    }
}

/// What a header says, without decoding pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImageInfo {
    /// The format, from the magic bytes.
    pub format: Format,
    /// Stored width (before orientation).
    pub width: u32,
    /// Stored height (before orientation).
    pub height: u32,
    /// EXIF orientation ([`Orientation::Normal`] when absent, unreadable, or PNG).
    pub orientation: Orientation,
    /// JPEG only: progressive coding.
    pub progressive: bool,
}

impl ImageInfo {
    /// `(width, height)` after the orientation is applied.
    pub fn display_size(&self) -> (u32, u32) {
        self.orientation.oriented_size(self.width, self.height)
    }
}

/// The format of `data` from its magic bytes (never from a file name).
pub fn sniff(data: &[u8]) -> Result<Format> {
    if data.is_empty() {
        return Err(VisionError::Empty);
    }
    if data.starts_with(&[0xFF, 0xD8]) {
        Ok(Format::Jpeg)
    } else if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        Ok(Format::Png)
    } else {
        Err(VisionError::UnknownFormat { head: data.iter().take(8).copied().collect() })
    }
}

/// Reads only the headers: format, stored size, orientation. Does not check the pixel limit
/// (the caller sees the size) nor that the data is complete.
pub fn probe(data: &[u8]) -> Result<ImageInfo> {
    match sniff(data)? {
        Format::Jpeg => {
            let h = jpeg::markers::read_header(data)?;
            Ok(ImageInfo {
                format: Format::Jpeg,
                width: h.width,
                height: h.height,
                orientation: h.orientation.unwrap_or_default(),
                progressive: h.coding == jpeg::markers::Coding::Progressive,
            })
        }
        Format::Png => {
            let (width, height) = png::read_size(data)?;
            Ok(ImageInfo { format: Format::Png, width, height, orientation: Orientation::Normal, progressive: false })
        }
    }
}

/// Decodes `data` (JPEG or PNG, by magic bytes) to RGB8 in display orientation.
pub fn decode(data: &[u8], opts: &DecodeOptions) -> Result<RgbImage> {
    decode_with_info(data, opts).map(|(_, img)| img)
}

/// [`decode`], also returning the header facts (the stored size is the full-scale one even
/// when the decode was reduced).
pub fn decode_with_info(data: &[u8], opts: &DecodeOptions) -> Result<(ImageInfo, RgbImage)> {
    let (info, stored) = match sniff(data)? {
        Format::Jpeg => {
            let reduce = opts.min_size.map(|size| jpeg::Reduce { size, display: !opts.keep_stored_orientation });
            let d = jpeg::decode(data, opts.limit, opts.backend, reduce)?;
            let h = d.header;
            let info = ImageInfo {
                format: Format::Jpeg,
                width: h.width,
                height: h.height,
                orientation: h.orientation.unwrap_or_default(),
                progressive: h.coding == jpeg::markers::Coding::Progressive,
            };
            (info, d.image)
        }
        Format::Png => {
            let img = png::decode(data, opts.limit)?;
            let info = ImageInfo {
                format: Format::Png,
                width: img.width(),
                height: img.height(),
                orientation: Orientation::Normal,
                progressive: false,
            };
            (info, img)
        }
    };
    let img = if opts.keep_stored_orientation { stored } else { info.orientation.apply(stored) };
    Ok((info, img))
}

/// Decodes with libjpeg-turbo at 1/`denom` size (1, 2, 4, 8), stored orientation; for
/// benchmarks and comparisons (feature `turbojpeg`).
#[cfg(feature = "turbojpeg")]
pub fn decode_jpeg_turbo(data: &[u8], limit: PixelLimit, denom: u8) -> Result<RgbImage> {
    if !matches!(denom, 1 | 2 | 4 | 8) {
        return Err(VisionError::invalid(format!("scale 1/{denom} (1, 2, 4 or 8)")));
    }
    if sniff(data)? != Format::Jpeg {
        return Err(VisionError::invalid("not a JPEG"));
    }
    jpeg::decode_turbo(data, limit, denom).map(|d| d.image)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn sniff_by_magic() {
        assert_eq!(sniff(&[]).unwrap_err().kind(), ErrorKind::Empty);
        assert_eq!(sniff(b"GIF89a").unwrap_err().kind(), ErrorKind::UnknownFormat);
        assert_eq!(sniff(&[0xFF, 0xD8]).unwrap(), Format::Jpeg);
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\nrest").unwrap(), Format::Png);
        assert!(sniff(b"GIF89a").unwrap_err().to_string().contains("[47, 49, 46"));
    }
}
