//! The decoded image type and the pixel budget that guards decoding.

use crate::error::{Result, VisionError};

/// An 8-bit RGB image, rows top to bottom, `height × width × 3` bytes (HWC, interleaved).
///
/// Both sides are at least 1: no decoder or transform of this crate produces an empty image,
/// so code downstream never has to handle one.
#[derive(Clone, PartialEq, Eq)]
pub struct RgbImage {
    width: u32,
    height: u32,
    data: Vec<u8>,
}

impl std::fmt::Debug for RgbImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RgbImage({}x{})", self.width, self.height)
    }
}

impl RgbImage {
    /// Wraps `data`; refuses a zero side or a length other than `width * height * 3`.
    pub fn new(width: u32, height: u32, data: Vec<u8>) -> Result<Self> {
        let want = rgb_len(width, height)?;
        if data.len() != want {
            return Err(VisionError::invalid(format!("{width}x{height} RGB needs {want} bytes, got {}", data.len())));
        }
        Ok(RgbImage { width, height, data })
    }

    /// An image of one colour.
    pub fn filled(width: u32, height: u32, rgb: [u8; 3]) -> Result<Self> {
        let len = rgb_len(width, height)?;
        let mut data = Vec::with_capacity(len);
        for _ in 0..len / 3 {
            data.extend_from_slice(&rgb);
        }
        Ok(RgbImage { width, height, data })
    }

    /// Width in pixels (≥ 1).
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels (≥ 1).
    pub fn height(&self) -> u32 {
        self.height
    }

    /// `(width, height)`.
    pub fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    /// The pixels, `height × width × 3` bytes.
    pub fn as_raw(&self) -> &[u8] {
        &self.data
    }

    /// The pixels, mutable (the length cannot change through a slice).
    pub fn as_raw_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// Takes the pixel buffer.
    pub fn into_raw(self) -> Vec<u8> {
        self.data
    }

    /// The pixel at `(x, y)`, if inside.
    pub fn pixel(&self, x: u32, y: u32) -> Option<[u8; 3]> {
        if x >= self.width || y >= self.height {
            return None;
        }
        let i = (y as usize * self.width as usize + x as usize) * 3;
        let p = self.data.get(i..i + 3)?;
        Some([p[0], p[1], p[2]])
    }

    /// One row of pixels (`width × 3` bytes), if inside.
    pub fn row(&self, y: u32) -> Option<&[u8]> {
        let stride = self.width as usize * 3;
        let start = (y as usize).checked_mul(stride)?;
        self.data.get(start..start.checked_add(stride)?)
    }

    /// Copies the rectangle at `(x, y)` of `width × height`; refuses one that leaves the image.
    pub fn crop(&self, x: u32, y: u32, width: u32, height: u32) -> Result<RgbImage> {
        let inside = x.checked_add(width).is_some_and(|r| r <= self.width)
            && y.checked_add(height).is_some_and(|b| b <= self.height);
        if !inside || width == 0 || height == 0 {
            return Err(VisionError::invalid(format!(
                "crop {width}x{height} at ({x}, {y}) is not a non-empty part of a {}x{} image",
                self.width, self.height
            )));
        }
        let stride = self.width as usize * 3;
        let mut data = Vec::with_capacity(rgb_len(width, height)?);
        for row in self.data.chunks_exact(stride).skip(y as usize).take(height as usize) {
            data.extend_from_slice(&row[x as usize * 3..(x + width) as usize * 3]);
        }
        RgbImage::new(width, height, data)
    }

    /// Mirrors the image left to right, in place.
    pub fn flip_horizontal(&mut self) {
        let stride = self.width as usize * 3;
        for row in self.data.chunks_exact_mut(stride) {
            let (mut l, mut r) = (0, row.len() / 3);
            while l + 1 < r {
                r -= 1;
                for c in 0..3 {
                    row.swap(l * 3 + c, r * 3 + c);
                }
                l += 1;
            }
        }
    }

    /// Mirrors the image top to bottom, in place.
    pub fn flip_vertical(&mut self) {
        let stride = self.width as usize * 3;
        let h = self.height as usize;
        for y in 0..h / 2 {
            let (top, bottom) = self.data.split_at_mut((h - 1 - y) * stride);
            top[y * stride..(y + 1) * stride].swap_with_slice(&mut bottom[..stride]);
        }
    }

    /// The image with rows and columns exchanged (`out(x, y) = in(y, x)`), size `h × w`.
    pub fn transpose(&self) -> RgbImage {
        self.transposed(false)
    }

    /// Transpose, optionally along the anti-diagonal (`out(x, y) = in(h-1-y, w-1-x)`), in one
    /// pass: the two transposing EXIF orientations need one copy, not a copy and flips.
    pub(crate) fn transposed(&self, anti: bool) -> RgbImage {
        let (w, h) = (self.width as usize, self.height as usize);
        let mut out = vec![0u8; self.data.len()];
        // Tiles keep both the read and the write side within cache lines.
        const T: usize = 32;
        for y0 in (0..h).step_by(T) {
            for x0 in (0..w).step_by(T) {
                for y in y0..(y0 + T).min(h) {
                    for x in x0..(x0 + T).min(w) {
                        let src = (y * w + x) * 3;
                        let (ox, oy) = if anti { (h - 1 - y, w - 1 - x) } else { (y, x) };
                        let dst = (oy * h + ox) * 3;
                        out[dst..dst + 3].copy_from_slice(&self.data[src..src + 3]);
                    }
                }
            }
        }
        RgbImage { width: self.height, height: self.width, data: out }
    }
}

/// Bytes of a `width × height` RGB8 image; refuses a zero side or an overflow.
pub(crate) fn rgb_len(width: u32, height: u32) -> Result<usize> {
    if width == 0 || height == 0 {
        return Err(VisionError::invalid(format!("image side of 0 ({width}x{height})")));
    }
    (width as usize)
        .checked_mul(height as usize)
        .and_then(|p| p.checked_mul(3))
        .ok_or_else(|| VisionError::invalid(format!("{width}x{height} does not fit in memory")))
}

/// The most pixels (`width × height`) a decoder will allocate for one image.
///
/// Checked against the header before any pixel memory exists, so a 100 000 × 100 000 header in
/// a 200-byte file (a decompression bomb) costs nothing. A limit is never zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PixelLimit(u64);

impl PixelLimit {
    /// The default: 64 Mi pixels (192 MiB of RGB8). The largest photo of the test corpus is
    /// 5640 × 3172 ≈ 17.9 Mpx; Pillow's bomb error starts at ~179 Mpx.
    pub const DEFAULT: PixelLimit = PixelLimit(1 << 26);

    /// A limit of `max_pixels`; refuses 0.
    pub fn new(max_pixels: u64) -> Result<Self> {
        if max_pixels == 0 {
            return Err(VisionError::invalid("a pixel limit of 0 admits no image"));
        }
        Ok(PixelLimit(max_pixels))
    }

    /// The limit in pixels.
    pub fn get(self) -> u64 {
        self.0
    }

    /// Refuses a `width × height` image over the limit.
    pub fn check(self, width: u32, height: u32) -> Result<()> {
        if u64::from(width) * u64::from(height) > self.0 {
            return Err(VisionError::TooLarge { width, height, limit: self.0 });
        }
        Ok(())
    }
}

impl Default for PixelLimit {
    fn default() -> Self {
        PixelLimit::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(w: u32, h: u32) -> RgbImage {
        let data = (0..w * h).flat_map(|i| [i as u8, (i >> 8) as u8, 7]).collect();
        RgbImage::new(w, h, data).unwrap()
    }

    #[test]
    fn constructor_checks_length_and_sides() {
        assert!(RgbImage::new(2, 2, vec![0; 12]).is_ok());
        assert!(RgbImage::new(2, 2, vec![0; 11]).is_err());
        assert!(RgbImage::new(0, 2, vec![]).is_err());
        assert!(RgbImage::filled(0, 1, [0; 3]).is_err());
        assert_eq!(RgbImage::filled(2, 1, [1, 2, 3]).unwrap().as_raw(), &[1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn pixel_limit_refuses_zero_and_large() {
        assert!(PixelLimit::new(0).is_err());
        let l = PixelLimit::new(100).unwrap();
        assert!(l.check(10, 10).is_ok());
        assert_eq!(l.check(10, 11).unwrap_err().kind(), crate::ErrorKind::TooLarge);
        assert!(PixelLimit::DEFAULT.check(65535, 65535).is_err());
        assert!(PixelLimit::DEFAULT.check(5640, 3172).is_ok());
    }

    #[test]
    fn flips_and_transposes() {
        let img = numbered(5, 3);
        let mut h = img.clone();
        h.flip_horizontal();
        assert_eq!(h.pixel(0, 1), img.pixel(4, 1));
        assert_eq!(h.pixel(2, 2), img.pixel(2, 2));
        h.flip_horizontal();
        assert_eq!(h, img);
        let mut v = img.clone();
        v.flip_vertical();
        assert_eq!(v.pixel(1, 0), img.pixel(1, 2));
        assert_eq!(v.pixel(1, 1), img.pixel(1, 1));
        let t = img.transpose();
        assert_eq!(t.size(), (3, 5));
        assert_eq!(t.pixel(2, 4), img.pixel(4, 2));
        let a = img.transposed(true);
        assert_eq!(a.pixel(0, 0), img.pixel(4, 2));
        assert_eq!(a.pixel(2, 4), img.pixel(0, 0));
    }

    #[test]
    fn crop_checks_bounds() {
        let img = numbered(5, 3);
        let c = img.crop(1, 1, 3, 2).unwrap();
        assert_eq!(c.pixel(0, 0), img.pixel(1, 1));
        assert_eq!(c.pixel(2, 1), img.pixel(3, 2));
        assert!(img.crop(3, 0, 3, 1).is_err());
        assert!(img.crop(u32::MAX, 0, 2, 1).is_err());
        assert!(img.crop(0, 0, 0, 1).is_err());
    }
}
