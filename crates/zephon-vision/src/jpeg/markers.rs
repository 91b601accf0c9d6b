//! A JPEG marker walker: the header facts this crate needs, and proof that the stream is whole.
//!
//! zune-jpeg decodes a file cut short without an error (missing rows come out grey), so the
//! structure is checked here before any pixel is decoded: every scan's entropy-coded data must
//! end at a marker, the stream must reach EOI, and every component must be coded in some scan.
//! The walk touches each byte once (a `0xFF` search inside scans) and allocates nothing that
//! scales with the image.
//!
//! The stream handed to a decoder holds only what decoding needs (frame, tables, scans, JFIF
//! and Adobe segments). Metadata (Exif, XMP, ICC, IPTC, MPF, comments) is read here and left
//! out, as is junk between segments: a decoder's opinion of metadata (libjpeg-turbo warns on a
//! bad ICC chunk, zune-jpeg's strict mode refuses a short APP14 or stray bytes) then cannot fail
//! a picture that Pillow shows.

use std::borrow::Cow;
use std::ops::Range;

use crate::error::{Format, Result, VisionError};
use crate::orientation::{self, Orientation};

const J: Format = Format::Jpeg;

/// More scans than this are refused: each progressive scan is a pass over the whole coefficient
/// buffer, so a small file of thousands of scans is a CPU bomb. zune-jpeg has the same default;
/// real encoders write at most a few dozen.
pub(crate) const MAX_SCANS: u32 = 100;

/// How the frame is coded (from its SOF marker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    /// SOF0/SOF1: sequential Huffman.
    Sequential,
    /// SOF2: progressive Huffman.
    Progressive,
}

/// What the headers up to the first scan say.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub width: u32,
    pub height: u32,
    pub components: u8,
    pub coding: Coding,
    /// From the first Exif APP1, else from the XMP packet (Pillow's order).
    pub orientation: Option<Orientation>,
}

/// A walked, complete stream.
#[derive(Debug)]
pub(crate) struct Layout {
    pub header: Header,
    /// Bytes of the image's own segments, in order, ending with EOI; empty when the stream can
    /// be given to the decoder as it is (`data[..end]`).
    keep: Vec<Range<usize>>,
    /// Whether anything was left out (metadata, junk, stray markers): the stream is then a copy.
    dirty: bool,
    /// One past the EOI marker: a second image or trailing bytes after it are not ours.
    end: usize,
}

impl Layout {
    /// The stream to decode: the file up to EOI when nothing was left out, else a copy of the
    /// kept segments (a memcpy of at most the file: noise next to decoding it).
    pub fn stream<'a>(&self, data: &'a [u8]) -> Cow<'a, [u8]> {
        if !self.dirty {
            return Cow::Borrowed(data.get(..self.end).unwrap_or(data));
        }
        let mut out = Vec::with_capacity(self.end);
        for r in &self.keep {
            if let Some(bytes) = data.get(r.clone()) {
                out.extend_from_slice(bytes);
            }
        }
        Cow::Owned(out)
    }
}

/// Walks the headers up to the first SOS (or EOF): cheap, for probing and the pixel limit.
pub(crate) fn read_header(data: &[u8]) -> Result<Header> {
    let mut w = Walker::new(data)?;
    w.headers()
}

/// Walks the whole stream to EOI; `check` runs on the header before the scans are walked (the
/// pixel limit: a bomb is refused as too large rather than as truncated).
pub(crate) fn walk(data: &[u8], check: impl FnOnce(&Header) -> Result<()>) -> Result<Layout> {
    let mut w = Walker::new(data)?;
    let header = w.headers()?;
    check(&header)?;
    w.scans(&header)?;
    Ok(Layout { header, keep: w.keep, dirty: w.dirty, end: w.pos })
}

struct Frame {
    ids: Vec<u8>,
}

struct Walker<'a> {
    data: &'a [u8],
    pos: usize,
    keep: Vec<Range<usize>>,
    dirty: bool,
    frame: Option<Frame>,
    /// Components (by index in the frame) coded by some scan so far.
    coded: [bool; 4],
    scans: u32,
    /// The orientation value of the first Exif segment (`Some(None)`: segment without one).
    exif: Option<Option<u32>>,
    xmp: Option<Orientation>,
    coding: Option<Coding>,
    /// Dimensions once a SOF was read.
    size: Option<(u32, u32)>,
}

impl<'a> Walker<'a> {
    fn new(data: &'a [u8]) -> Result<Self> {
        if data.get(..2) != Some(&[0xFF, 0xD8]) {
            return Err(VisionError::corrupt(J, "no SOI marker at the start"));
        }
        Ok(Walker {
            data,
            pos: 2,
            // The SOI marker.
            keep: std::iter::once(0..2).collect(),
            dirty: false,
            frame: None,
            coded: [false; 4],
            scans: 0,
            exif: None,
            xmp: None,
            coding: None,
            size: None,
        })
    }

    /// The next marker code at or after `pos`, skipping junk and fill bytes like libjpeg's
    /// `next_marker`; `None` at the end of the data. Leaves `pos` after the code byte.
    fn next_marker(&mut self) -> Option<u8> {
        loop {
            let rest = self.data.get(self.pos..)?;
            let ff = rest.iter().position(|&b| b == 0xFF)?;
            if ff > 0 {
                self.dirty = true;
            }
            self.pos += ff + 1;
            // Fill bytes: any number of 0xFF before the code.
            while self.data.get(self.pos) == Some(&0xFF) {
                self.pos += 1;
            }
            let code = *self.data.get(self.pos)?;
            self.pos += 1;
            if code == 0x00 {
                // A stuffed zero outside a scan is junk, not a marker.
                self.dirty = true;
                continue;
            }
            return Some(code);
        }
    }

    /// The payload of the length-prefixed segment whose code was just read; keeps the segment.
    fn segment(&mut self, code: u8) -> Result<&'a [u8]> {
        let start = self.pos - 2;
        let len = match self.data.get(self.pos..self.pos + 2) {
            Some(b) => usize::from(u16::from_be_bytes([b[0], b[1]])),
            None => return Err(self.cut(format!("in the length of marker 0xFF{code:02X}"))),
        };
        if len < 2 {
            return Err(VisionError::corrupt(J, format!("marker 0xFF{code:02X} has length {len} (< 2)")));
        }
        let Some(payload) = self.data.get(self.pos + 2..self.pos + len) else {
            return Err(self.cut(format!("inside marker segment 0xFF{code:02X} ({len} bytes declared)")));
        };
        self.keep.push(start..self.pos + len);
        self.pos += len;
        Ok(payload)
    }

    fn cut(&self, where_: String) -> VisionError {
        VisionError::truncated(J, format!("data ends {where_} at byte {}", self.data.len()))
    }

    /// Header segments up to and including the first SOS (left positioned at its scan data).
    fn headers(&mut self) -> Result<Header> {
        loop {
            let Some(code) = self.next_marker() else {
                return Err(match self.size {
                    Some(_) => self.cut("before the first scan".into()),
                    None => self.cut("before the frame header (SOF)".into()),
                });
            };
            match code {
                0xD8 => return Err(VisionError::corrupt(J, "a second SOI inside the headers")),
                0xD9 => {
                    let what = if self.frame.is_some() { "EOI before any scan" } else { "EOI before any frame" };
                    return Err(VisionError::corrupt(J, what));
                }
                0xDA => {
                    self.sos()?;
                    return self.header();
                }
                _ => self.marker(code)?,
            }
        }
    }

    fn header(&self) -> Result<Header> {
        let ((width, height), coding, frame) = match (self.size, self.coding, &self.frame) {
            (Some(s), Some(c), Some(f)) => (s, c, f),
            _ => return Err(VisionError::corrupt(J, "scan before the frame header (SOF)")),
        };
        Ok(Header {
            width,
            height,
            components: frame.ids.len() as u8,
            coding,
            // Pillow reads XMP only when EXIF has no orientation tag at all.
            orientation: match self.exif {
                Some(Some(v)) => Orientation::from_exif(v),
                _ => self.xmp,
            },
        })
    }

    /// Everything but SOI/EOI/SOS, before or between scans.
    fn marker(&mut self, code: u8) -> Result<()> {
        match code {
            // RSTn and TEM outside a scan carry nothing: skipped (libjpeg warns and goes on).
            0xD0..=0xD7 | 0x01 => {
                self.dirty = true;
                Ok(())
            }
            0xC0..=0xC2 => {
                let p = self.segment(code)?;
                self.sof(code, p)
            }
            0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => {
                let what = match code {
                    0xC3 => "lossless coding (SOF3)",
                    0xC5..=0xC7 => "hierarchical coding (SOF5-7)",
                    0xC9 | 0xCA => "arithmetic coding",
                    _ => "lossless/hierarchical arithmetic coding",
                };
                Err(VisionError::unsupported(J, what))
            }
            0xCC => Err(VisionError::unsupported(J, "arithmetic coding (DAC marker)")),
            0xF7 => Err(VisionError::unsupported(J, "JPEG-LS")),
            0xC4 | 0xDB | 0xDD | 0xDC => self.segment(code).map(drop),
            0xFE => {
                self.segment(code)?;
                self.drop_last();
                Ok(())
            }
            0xE0..=0xEF => {
                let p = self.segment(code)?;
                self.app(code, p);
                Ok(())
            }
            _ => Err(VisionError::corrupt(J, format!("unknown marker 0xFF{code:02X}"))),
        }
    }

    fn sof(&mut self, code: u8, p: &[u8]) -> Result<()> {
        if self.frame.is_some() {
            return Err(VisionError::corrupt(J, "a second frame header (SOF)"));
        }
        let [precision, h0, h1, w0, w1, n, rest @ ..] = p else {
            return Err(VisionError::corrupt(J, "frame header (SOF) shorter than 6 bytes"));
        };
        if *precision != 8 {
            return Err(VisionError::unsupported(J, format!("{precision}-bit samples (only 8-bit)")));
        }
        let height = u32::from(u16::from_be_bytes([*h0, *h1]));
        let width = u32::from(u16::from_be_bytes([*w0, *w1]));
        if width == 0 {
            return Err(VisionError::corrupt(J, "frame width 0"));
        }
        if height == 0 {
            return Err(VisionError::unsupported(J, "height given by a DNL marker (frame height 0)"));
        }
        if !matches!(n, 1 | 3 | 4) {
            return Err(VisionError::unsupported(J, format!("{n} colour components (1, 3 or 4)")));
        }
        let comps = rest
            .get(..usize::from(*n) * 3)
            .ok_or_else(|| VisionError::corrupt(J, format!("frame header (SOF) too short for {n} components")))?;
        let mut ids = Vec::with_capacity(usize::from(*n));
        for c in comps.chunks_exact(3) {
            let (h, v) = (c[1] >> 4, c[1] & 15);
            if !(1..=4).contains(&h) || !(1..=4).contains(&v) {
                return Err(VisionError::corrupt(J, format!("sampling factors {h}x{v} of component {}", c[0])));
            }
            if ids.contains(&c[0]) {
                return Err(VisionError::corrupt(J, format!("component id {} twice in the frame", c[0])));
            }
            ids.push(c[0]);
        }
        self.frame = Some(Frame { ids });
        self.size = Some((width, height));
        self.coding = Some(if code == 0xC2 { Coding::Progressive } else { Coding::Sequential });
        Ok(())
    }

    /// Forgets the segment just kept.
    fn drop_last(&mut self) {
        self.keep.pop();
        self.dirty = true;
    }

    /// Reads what this crate needs from an APPn segment; keeps only JFIF/AVI1 (APP0) and a
    /// well-formed Adobe segment (APP14), the two that steer colour conversion.
    fn app(&mut self, code: u8, p: &'a [u8]) {
        let keep = match code {
            0xE0 => true,
            // libjpeg ignores an Adobe segment shorter than 12 bytes; zune-jpeg refuses the file.
            0xEE => p.starts_with(b"Adobe") && p.len() >= 12,
            _ => false,
        };
        if !keep {
            self.drop_last();
        }
        match code {
            0xE1 if p.starts_with(b"Exif\0\0") && self.exif.is_none() => {
                // Pillow keeps the first Exif segment, even when its orientation is unusable.
                self.exif = Some(orientation::exif_tag(p));
            }
            0xE1 if p.starts_with(b"http://ns.adobe.com/xap/1.0/\0") => {
                // Pillow keeps the last XMP packet.
                self.xmp = orientation::from_xmp(p);
            }
            _ => {}
        }
    }

    /// Parses the SOS header just read (keeps it) and records the components it codes.
    fn sos(&mut self) -> Result<()> {
        let p = self.segment(0xDA)?;
        let Some(frame) = &self.frame else {
            return Err(VisionError::corrupt(J, "scan before the frame header (SOF)"));
        };
        let [ns, rest @ ..] = p else {
            return Err(VisionError::corrupt(J, "empty scan header (SOS)"));
        };
        let ns = usize::from(*ns);
        let ids = rest
            .get(..ns * 2)
            .filter(|_| (1..=4).contains(&ns))
            .ok_or_else(|| VisionError::corrupt(J, format!("scan header (SOS) with {ns} components")))?;
        for c in ids.chunks_exact(2) {
            let Some(i) = frame.ids.iter().position(|&id| id == c[0]) else {
                return Err(VisionError::corrupt(J, format!("scan codes component {} not in the frame", c[0])));
            };
            if let Some(flag) = self.coded.get_mut(i) {
                *flag = true;
            }
        }
        self.scans += 1;
        if self.scans > MAX_SCANS {
            return Err(VisionError::unsupported(J, format!("more than {MAX_SCANS} scans")));
        }
        Ok(())
    }

    /// Skips one scan's entropy-coded data; leaves `pos` at the marker that ends it.
    fn entropy_data(&mut self) -> Result<()> {
        let start = self.pos;
        loop {
            let Some(ff) = self.data.get(self.pos..).and_then(|r| r.iter().position(|&b| b == 0xFF)) else {
                return Err(self.cut(format!("inside the entropy-coded data of scan {}", self.scans)));
            };
            let at = self.pos + ff;
            match self.data.get(at + 1) {
                None => return Err(self.cut(format!("inside the entropy-coded data of scan {}", self.scans))),
                // Stuffed zero, restart marker: still inside the scan. A fill 0xFF is looked at
                // again as the possible start of the marker.
                Some(0x00 | 0xD0..=0xD7) => self.pos = at + 2,
                Some(0xFF) => self.pos = at + 1,
                Some(_) => {
                    self.keep.push(start..at);
                    self.pos = at;
                    return Ok(());
                }
            }
        }
    }

    /// From the first scan's data to EOI.
    fn scans(&mut self, header: &Header) -> Result<()> {
        loop {
            self.entropy_data()?;
            let code = loop {
                match self.next_marker() {
                    None => return Err(self.cut(format!("after scan {} without an EOI marker", self.scans))),
                    Some(0xDA) => {
                        self.sos()?;
                        break None;
                    }
                    Some(0xD9) => break Some(()),
                    Some(0xD8) => return Err(VisionError::corrupt(J, "SOI inside the image")),
                    Some(0xC0..=0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF) => {
                        return Err(VisionError::corrupt(J, "a second frame header (SOF) after a scan"));
                    }
                    Some(c) => self.marker(c)?,
                }
            };
            if code.is_some() {
                break;
            }
        }
        self.keep.push(self.pos - 2..self.pos);
        let n = usize::from(header.components);
        if let Some(i) = self.coded.iter().take(n).position(|c| !c) {
            return Err(VisionError::corrupt(
                J,
                format!("component {} is coded by none of the {} scans", i, self.scans),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    /// A minimal structurally valid 1-component baseline file (the entropy data is made up).
    fn tiny(scan: &[u8]) -> Vec<u8> {
        let mut f = vec![0xFF, 0xD8];
        f.extend([0xFF, 0xC0, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0]);
        f.extend([0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 63, 0]);
        f.extend(scan);
        f
    }

    fn kind(data: &[u8]) -> ErrorKind {
        walk(data, |_| Ok(())).unwrap_err().kind()
    }

    #[test]
    fn complete_stream_is_accepted_and_trailing_bytes_dropped() {
        let mut f = tiny(&[1, 2, 0xFF, 0x00, 3, 0xFF, 0xD0, 4, 0xFF, 0xFF, 0xD9]);
        let end = f.len();
        f.extend(b"garbage");
        let l = walk(&f, |_| Ok(())).unwrap();
        assert_eq!((l.header.width, l.header.height, l.header.components), (8, 8, 1));
        assert_eq!(l.stream(&f).len(), end);
    }

    #[test]
    fn truncation_anywhere_is_detected() {
        let f = tiny(&[1, 2, 3, 0xFF, 0xD9]);
        for cut in 1..f.len() - 1 {
            let k = walk(&f[..cut], |_| Ok(())).map(|_| ()).unwrap_err().kind();
            assert!(matches!(k, ErrorKind::Truncated | ErrorKind::Corrupt), "cut at {cut}: {k:?}");
        }
        assert_eq!(kind(&f[..f.len() - 2]), ErrorKind::Truncated);
        assert_eq!(kind(&f[..f.len() - 1]), ErrorKind::Truncated);
    }

    #[test]
    fn structure_errors() {
        assert_eq!(kind(&[0xFF, 0xD8, 0xFF, 0xD9]), ErrorKind::Corrupt);
        // 12-bit, arithmetic.
        let mut f = tiny(&[0xFF, 0xD9]);
        f[6] = 12;
        assert_eq!(kind(&f), ErrorKind::Unsupported);
        let mut f = tiny(&[0xFF, 0xD9]);
        f[3] = 0xC9;
        assert_eq!(kind(&f), ErrorKind::Unsupported);
        // Width 0; a segment length of 1.
        let mut f = tiny(&[0xFF, 0xD9]);
        f[10] = 0;
        assert_eq!(kind(&f), ErrorKind::Corrupt);
        let mut f = tiny(&[0xFF, 0xD9]);
        f[5] = 1;
        assert_eq!(kind(&f), ErrorKind::Corrupt);
        // A scan coding a component that is not in the frame.
        let mut f = tiny(&[0xFF, 0xD9]);
        f[20] = 9;
        assert_eq!(kind(&f), ErrorKind::Corrupt);
    }

    #[test]
    fn junk_between_segments_is_cut_out() {
        let clean = tiny(&[5, 0xFF, 0xD9]);
        let mut f = clean[..2].to_vec();
        f.extend(b"junk");
        f.extend(&clean[2..]);
        let l = walk(&f, |_| Ok(())).unwrap();
        assert_eq!(&*l.stream(&f), &clean[..]);
    }

    #[test]
    fn metadata_is_read_then_left_out_of_the_stream() {
        let clean = tiny(&[5, 0xFF, 0xD9]);
        let mut exif = b"Exif\0\0MM\0*\0\0\0\x08\0\x01\x01\x12\0\x03\0\0\0\x01\0\x06\0\0".to_vec();
        let mut f = clean[..2].to_vec();
        f.extend([0xFF, 0xE1, 0, exif.len() as u8 + 2]);
        f.append(&mut exif);
        f.extend([0xFF, 0xFE, 0, 4, b'h', b'i']);
        f.extend([0xFF, 0xE0, 0, 7, b'J', b'F', b'I', b'F', 0]);
        f.extend(&clean[2..]);
        let l = walk(&f, |_| Ok(())).unwrap();
        assert_eq!(l.header.orientation, Some(Orientation::Rotate90Cw));
        let mut want = clean[..2].to_vec();
        want.extend([0xFF, 0xE0, 0, 7, b'J', b'F', b'I', b'F', 0]);
        want.extend(&clean[2..]);
        assert_eq!(&*l.stream(&f), &want[..]);
    }

    #[test]
    fn too_many_scans_are_refused() {
        let mut f = tiny(&[1]);
        for _ in 0..MAX_SCANS {
            f.extend([0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 63, 0, 1]);
        }
        f.extend([0xFF, 0xD9]);
        let err = walk(&f, |_| Ok(())).unwrap_err();
        assert!(err.to_string().contains("more than 100 scans"), "{err}");
    }

    #[test]
    fn the_check_runs_before_the_scans() {
        let f = tiny(&[1, 2, 3]);
        let err = walk(&f, |_| Err(VisionError::invalid("x"))).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    }
}
