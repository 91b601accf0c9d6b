//! EXIF orientation: reading it from an Exif (TIFF) or XMP payload, and applying it.
//!
//! Metadata is untrusted: every read is bounds-checked and any inconsistency means "no
//! orientation" (the image itself still decodes), which is what Pillow does with broken EXIF.

use crate::image::RgbImage;

/// How the stored pixels must be transformed for display (EXIF tag 0x0112), named by what
/// Pillow's `ImageOps.exif_transpose` does for each value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Orientation {
    /// 1: as stored.
    #[default]
    Normal,
    /// 2: mirror left-right.
    FlipHorizontal,
    /// 3: rotate 180°.
    Rotate180,
    /// 4: mirror top-bottom.
    FlipVertical,
    /// 5: transpose (mirror along the main diagonal).
    Transpose,
    /// 6: rotate 90° clockwise (Pillow's `ROTATE_270`).
    Rotate90Cw,
    /// 7: transverse (mirror along the anti-diagonal).
    Transverse,
    /// 8: rotate 90° counter-clockwise (Pillow's `ROTATE_90`).
    Rotate90Ccw,
}

impl Orientation {
    /// The orientation of EXIF value `v` (1..=8); `None` for anything else.
    pub fn from_exif(v: u32) -> Option<Self> {
        Some(match v {
            1 => Orientation::Normal,
            2 => Orientation::FlipHorizontal,
            3 => Orientation::Rotate180,
            4 => Orientation::FlipVertical,
            5 => Orientation::Transpose,
            6 => Orientation::Rotate90Cw,
            7 => Orientation::Transverse,
            8 => Orientation::Rotate90Ccw,
            _ => return None,
        })
    }

    /// The EXIF value (1..=8).
    pub fn exif_value(self) -> u8 {
        match self {
            Orientation::Normal => 1,
            Orientation::FlipHorizontal => 2,
            Orientation::Rotate180 => 3,
            Orientation::FlipVertical => 4,
            Orientation::Transpose => 5,
            Orientation::Rotate90Cw => 6,
            Orientation::Transverse => 7,
            Orientation::Rotate90Ccw => 8,
        }
    }

    /// Whether applying it exchanges width and height.
    pub fn swaps_sides(self) -> bool {
        matches!(
            self,
            Orientation::Transpose | Orientation::Rotate90Cw | Orientation::Transverse | Orientation::Rotate90Ccw
        )
    }

    /// `(width, height)` after applying it to a stored `width × height` image.
    pub fn oriented_size(self, width: u32, height: u32) -> (u32, u32) {
        if self.swaps_sides() { (height, width) } else { (width, height) }
    }

    /// Transforms stored pixels into display orientation (what `exif_transpose` returns).
    pub fn apply(self, mut img: RgbImage) -> RgbImage {
        match self {
            Orientation::Normal => img,
            Orientation::FlipHorizontal => {
                img.flip_horizontal();
                img
            }
            Orientation::Rotate180 => {
                img.flip_horizontal();
                img.flip_vertical();
                img
            }
            Orientation::FlipVertical => {
                img.flip_vertical();
                img
            }
            Orientation::Transpose => img.transposed(false),
            Orientation::Rotate90Cw => {
                let mut t = img.transposed(false);
                t.flip_horizontal();
                t
            }
            Orientation::Transverse => img.transposed(true),
            Orientation::Rotate90Ccw => {
                let mut t = img.transposed(false);
                t.flip_vertical();
                t
            }
        }
    }
}

/// The orientation tag value of an APP1 Exif payload (starting at `Exif\0\0`), if readable.
pub(crate) fn exif_tag(payload: &[u8]) -> Option<u32> {
    tiff_tag(payload.strip_prefix(b"Exif\0\0")?)
}

/// Tag 0x0112 of IFD0 of a TIFF structure, as a valid orientation.
#[cfg(test)]
fn from_tiff(tiff: &[u8]) -> Option<Orientation> {
    Orientation::from_exif(tiff_tag(tiff)?)
}

/// The value of tag 0x0112 of IFD0 of a TIFF structure (one SHORT or LONG).
fn tiff_tag(tiff: &[u8]) -> Option<u32> {
    let big = match tiff.get(0..4)? {
        b"II*\0" => false,
        b"MM\0*" => true,
        _ => return None,
    };
    let u16_at = |at: usize| -> Option<u16> {
        let b: [u8; 2] = tiff.get(at..at.checked_add(2)?)?.try_into().ok()?;
        Some(if big { u16::from_be_bytes(b) } else { u16::from_le_bytes(b) })
    };
    let u32_at = |at: usize| -> Option<u32> {
        let b: [u8; 4] = tiff.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if big { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) })
    };
    let ifd = usize::try_from(u32_at(4)?).ok()?;
    let entries = u16_at(ifd)?;
    for i in 0..usize::from(entries) {
        let e = ifd.checked_add(2)?.checked_add(i.checked_mul(12)?)?;
        if u16_at(e)? != 0x0112 {
            continue;
        }
        return match (u16_at(e + 2)?, u32_at(e + 4)?) {
            // SHORT and LONG values of count 1 sit in the entry itself, left-aligned.
            (3, 1) => Some(u32::from(u16_at(e + 8)?)),
            (4, 1) => u32_at(e + 8),
            _ => None,
        };
    }
    None
}

/// The `tiff:Orientation` of an XMP packet, which Pillow uses when EXIF has no orientation:
/// the first `tiff:Orientation="N"` or `tiff:Orientation>N` with one digit N.
pub(crate) fn from_xmp(xmp: &[u8]) -> Option<Orientation> {
    const KEY: &[u8] = b"tiff:Orientation";
    let mut rest = xmp;
    while let Some(at) = find(rest, KEY) {
        let after = rest.get(at + KEY.len()..)?;
        let digit = match after {
            [b'=', b'"', d, ..] | [b'>', d, ..] if d.is_ascii_digit() => Some(*d),
            _ => None,
        };
        if let Some(d) = digit {
            return Orientation::from_exif(u32::from(d - b'0'));
        }
        rest = after;
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiff(big: bool, entries: &[(u16, u16, u32, u32)]) -> Vec<u8> {
        let mut t = Vec::new();
        let p16 = |t: &mut Vec<u8>, v: u16| t.extend(if big { v.to_be_bytes() } else { v.to_le_bytes() });
        let p32 = |t: &mut Vec<u8>, v: u32| t.extend(if big { v.to_be_bytes() } else { v.to_le_bytes() });
        t.extend_from_slice(if big { b"MM\0*" } else { b"II*\0" });
        p32(&mut t, 8);
        p16(&mut t, entries.len() as u16);
        for &(tag, ty, count, value) in entries {
            p16(&mut t, tag);
            p16(&mut t, ty);
            p32(&mut t, count);
            if ty == 3 {
                p16(&mut t, value as u16);
                p16(&mut t, 0);
            } else {
                p32(&mut t, value);
            }
        }
        t
    }

    #[test]
    fn reads_short_and_long_in_both_byte_orders() {
        for big in [false, true] {
            let t = tiff(big, &[(0x010f, 2, 4, 0), (0x0112, 3, 1, 6)]);
            assert_eq!(from_tiff(&t), Some(Orientation::Rotate90Cw));
            let t = tiff(big, &[(0x0112, 4, 1, 8)]);
            assert_eq!(from_tiff(&t), Some(Orientation::Rotate90Ccw));
        }
    }

    #[test]
    fn broken_exif_is_no_orientation() {
        assert_eq!(from_tiff(&tiff(false, &[(0x0112, 3, 1, 9)])), None);
        assert_eq!(from_tiff(&tiff(false, &[(0x0112, 3, 2, 6)])), None);
        let mut t = tiff(false, &[(0x0112, 3, 1, 6)]);
        t.truncate(t.len() - 3);
        assert_eq!(from_tiff(&t), None);
        // IFD offset far outside, entry count larger than the data.
        assert_eq!(from_tiff(b"II*\0\xff\xff\xff\xff"), None);
        assert_eq!(from_tiff(b"II*\0\x08\0\0\0\xff\xff"), None);
        assert_eq!(exif_tag(b"Exif\0\0"), None);
        assert_eq!(exif_tag(b""), None);
    }

    #[test]
    fn xmp_orientation() {
        assert_eq!(from_xmp(b"<x tiff:Orientation=\"3\"/>"), Some(Orientation::Rotate180));
        assert_eq!(from_xmp(b"<tiff:Orientation>6</tiff:Orientation>"), Some(Orientation::Rotate90Cw));
        assert_eq!(from_xmp(b"tiff:Orientation tiff:Orientation=\"2\""), Some(Orientation::FlipHorizontal));
        assert_eq!(from_xmp(b"tiff:Orientation=\"x\""), None);
        assert_eq!(from_xmp(b"tiff:Orientation"), None);
    }

    #[test]
    fn all_eight_orientations_match_their_definition() {
        let (w, h) = (3u32, 2u32);
        let data: Vec<u8> = (0..w * h).flat_map(|i| [i as u8; 3]).collect();
        let img = RgbImage::new(w, h, data).unwrap();
        // out(x, y) = in(f(x, y)) for each orientation, written out as in Pillow's docs.
        type Map = fn(u32, u32, u32, u32) -> (u32, u32);
        let cases: [(u32, Map); 8] = [
            (1, |x, y, _, _| (x, y)),
            (2, |x, y, w, _| (w - 1 - x, y)),
            (3, |x, y, w, h| (w - 1 - x, h - 1 - y)),
            (4, |x, y, _, h| (x, h - 1 - y)),
            (5, |x, y, _, _| (y, x)),
            (6, |x, y, _, h| (y, h - 1 - x)),
            (7, |x, y, w, h| (w - 1 - y, h - 1 - x)),
            (8, |x, y, w, _| (w - 1 - y, x)),
        ];
        for (v, f) in cases {
            let o = Orientation::from_exif(v).unwrap();
            assert_eq!(o.exif_value() as u32, v);
            let out = o.apply(img.clone());
            assert_eq!(out.size(), o.oriented_size(w, h), "orientation {v}");
            for y in 0..out.height() {
                for x in 0..out.width() {
                    let (sx, sy) = f(x, y, w, h);
                    assert_eq!(out.pixel(x, y), img.pixel(sx, sy), "orientation {v} at ({x}, {y})");
                }
            }
        }
    }
}
