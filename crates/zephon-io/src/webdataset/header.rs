//! Tar headers, parsed by hand: ustar and GNU 512-byte headers (octal or base-256 numbers,
//! checksum verified), GNU long names (`././@LongLink`, type `L`) and pax extended headers
//! (type `x`: `path` and `size`).
//!
//! The scan reads headers only, with positioned reads: a member's data is skipped by its
//! size, so indexing a shard costs one 512-byte read per member. Each step moves forward by at
//! least one block and every offset is checked against the file's length before it is used,
//! so a damaged file ends the scan with an error naming the offset, never a hang or a panic.

use crate::storage::Object;

const BLOCK: u64 = 512;

/// The most bytes a GNU long name or a pax header may hold; real ones are a few hundred.
/// Larger sizes are damaged headers, and are not allocated.
const MAX_META: u64 = 1 << 20;

/// A regular member: its name and where its data lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) name: String,
    /// Offset of its header (of the first of its headers, when a long name or pax header
    /// precedes it), for messages.
    pub(crate) header: u64,
    /// Offset of its data.
    pub(crate) offset: u64,
    pub(crate) size: u64,
}

/// Reads `buf.len()` bytes at `at`.
fn read_at(file: &dyn Object, buf: &mut [u8], at: u64) -> Result<(), String> {
    file.read_exact_at(buf, at).map_err(|e| format!("cannot read bytes {at}..{}: {e}", at + buf.len() as u64))
}

/// Every regular member of the tar `file` of `len` bytes, in order. Directories, links,
/// devices and FIFOs are skipped; a sparse member is refused (its data is not its content).
pub(crate) fn scan(file: &dyn Object, len: u64) -> Result<Vec<Member>, String> {
    let mut members = Vec::new();
    let mut at = 0u64;
    // What the headers before the current one said about it.
    let mut long_name: Option<String> = None;
    let mut pax = Pax::default();
    let mut first_header: Option<u64> = None;
    let mut block = [0u8; BLOCK as usize];
    let after = |members: &[Member]| members.last().map_or(String::new(), |m| format!(" (after member {:?})", m.name));
    loop {
        // `at` may pass `len` by the padding of a last member whose padding was cut off.
        if at >= len {
            return Err(format!(
                "ends at byte {len} without the end-of-archive marker (two zero blocks){}: truncated?",
                after(&members)
            ));
        }
        if len - at < BLOCK {
            return Err(format!(
                "the header at offset {at} is cut short ({} of 512 bytes){}: truncated?",
                len - at,
                after(&members)
            ));
        }
        read_at(file, &mut block, at)?;
        if block.iter().all(|&b| b == 0) {
            if long_name.is_some() || pax.any() {
                return Err(format!(
                    "the archive ends at offset {at} right after a long-name or pax header, with no member for it"
                ));
            }
            // The end-of-archive marker. What follows (the second zero block, padding to the
            // writer's record size) is not read: tar readers stop here.
            return Ok(members);
        }
        let header = Header::parse(&block).map_err(|e| format!("the header at offset {at} is damaged: {e}"))?;
        let size = pax.size.unwrap_or(header.size);
        let data = at + BLOCK;
        let name = || pax.path.clone().or_else(|| long_name.clone()).unwrap_or_else(|| header.name.clone());
        // Header-only types carry no data whatever their size field says (as GNU tar, Python
        // and Go read them).
        let has_data = !matches!(header.kind, b'1'..=b'6');
        let end = if has_data { data.checked_add(size) } else { Some(data) };
        let start = *first_header.get_or_insert(at);
        let Some(end) = end.filter(|&e| e <= len) else {
            return Err(format!(
                "member {:?} (header at offset {start}) has {size} bytes of data, but the file ends {} bytes \
                 after its header: truncated?",
                name(),
                len - data
            ));
        };
        // Data is padded to whole blocks; the padding of the last member may be cut off only
        // if the end-of-archive marker is too, which the next step reports.
        let next = end.div_ceil(BLOCK).saturating_mul(BLOCK);
        match header.kind {
            b'L' => {
                let bytes = read_meta(file, data, size).map_err(|e| format!("GNU long name at offset {at}: {e}"))?;
                let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
                long_name = Some(String::from_utf8_lossy(&bytes[..end]).into_owned());
            }
            b'x' => {
                let bytes = read_meta(file, data, size).map_err(|e| format!("pax header at offset {at}: {e}"))?;
                pax = Pax::parse(&bytes).map_err(|e| format!("pax header at offset {at}: {e}"))?;
            }
            // A long link target, pax globals: nothing a sample needs.
            b'K' | b'g' => {}
            kind => {
                let header_at = first_header.take().unwrap_or(start);
                if pax.sparse || kind == b'S' {
                    return Err(format!(
                        "member {:?} (header at offset {header_at}) is a sparse file; zephon reads only plain \
                         members",
                        name()
                    ));
                }
                // `0`, NUL (old tars) and `7` (contiguous) are regular files; others are
                // directories, links, devices, FIFOs or kinds zephon does not know.
                if matches!(kind, b'0' | 0 | b'7') {
                    members.push(Member { name: name(), header: header_at, offset: data, size });
                }
                long_name = None;
                pax = Pax::default();
            }
        }
        at = next;
    }
}

/// The data of a long-name or pax header: bounded, because its size comes from the file.
fn read_meta(file: &dyn Object, at: u64, size: u64) -> Result<Vec<u8>, String> {
    if size > MAX_META {
        return Err(format!("{size} bytes, more than any real one (damaged?)"));
    }
    let mut bytes = vec![0u8; size as usize];
    read_at(file, &mut bytes, at)?;
    Ok(bytes)
}

/// The fields of one 512-byte header that the scan needs.
#[derive(Debug, PartialEq)]
pub(crate) struct Header {
    pub(crate) name: String,
    pub(crate) size: u64,
    pub(crate) kind: u8,
}

impl Header {
    pub(crate) fn parse(block: &[u8; BLOCK as usize]) -> Result<Header, String> {
        let stored = octal(&block[148..156]).ok_or("the checksum field is not a number")?;
        // The checksum is the sum of the header's bytes with its own field read as spaces;
        // old writers summed signed bytes, and readers accept either.
        let field = 148..156;
        let (mut unsigned, mut signed) = (0u64, 0i64);
        for (i, &b) in block.iter().enumerate() {
            let b = if field.contains(&i) { b' ' } else { b };
            unsigned += u64::from(b);
            signed += i64::from(b as i8);
        }
        if stored != unsigned && i64::try_from(stored).ok() != Some(signed) {
            return Err(format!("checksum mismatch (stored {stored}, computed {unsigned})"));
        }
        let size = number(&block[124..136]).ok_or("the size field is not a number")?;
        let kind = block[156];
        let mut name = cstr(&block[0..100]).to_vec();
        // POSIX ustar keeps the start of long names in a prefix field; GNU headers use those
        // bytes for other things and say so by their magic.
        if &block[257..263] == b"ustar\0" {
            let prefix = cstr(&block[345..500]);
            if !prefix.is_empty() {
                let mut full = prefix.to_vec();
                full.push(b'/');
                full.extend_from_slice(&name);
                name = full;
            }
        }
        Ok(Header { name: String::from_utf8_lossy(&name).into_owned(), size, kind })
    }
}

/// The bytes of a NUL-terminated field, up to the NUL.
fn cstr(field: &[u8]) -> &[u8] {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    &field[..end]
}

/// An octal number field: optional leading spaces, digits, then NULs or spaces.
fn octal(field: &[u8]) -> Option<u64> {
    let start = field.iter().position(|&b| b != b' ')?;
    let digits = field[start..].iter().take_while(|b| (b'0'..=b'7').contains(b)).count();
    let rest = &field[start + digits..];
    if digits == 0 || rest.iter().any(|&b| b != 0 && b != b' ') {
        return None;
    }
    field[start..start + digits].iter().try_fold(0u64, |n, &d| n.checked_mul(8)?.checked_add(u64::from(d - b'0')))
}

/// A numeric field: octal, or GNU base-256 (high bit of the first byte set) for values octal
/// cannot hold. Negative values are refused.
fn number(field: &[u8]) -> Option<u64> {
    match field.first() {
        Some(&first) if first & 0x80 != 0 => {
            if first & 0x40 != 0 {
                return None;
            }
            let mut n = u64::from(first & 0x3f);
            for &b in &field[1..] {
                n = n.checked_mul(256)?.checked_add(u64::from(b))?;
            }
            Some(n)
        }
        _ => octal(field),
    }
}

/// What a pax extended header says about the next member.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Pax {
    pub(crate) path: Option<String>,
    pub(crate) size: Option<u64>,
    /// GNU sparse keys: the data is not the content.
    pub(crate) sparse: bool,
}

impl Pax {
    fn any(&self) -> bool {
        self.path.is_some() || self.size.is_some() || self.sparse
    }

    /// Parses records `"<len> <key>=<value>\n"`, where `len` counts the whole record.
    pub(crate) fn parse(mut bytes: &[u8]) -> Result<Pax, String> {
        let mut pax = Pax::default();
        let total = bytes.len();
        while !bytes.is_empty() {
            let at = total - bytes.len();
            // Some writers pad the data with NULs.
            if bytes.iter().all(|&b| b == 0) {
                break;
            }
            let bad = |what: &str| format!("malformed record at byte {at}: {what}");
            let space = bytes.iter().position(|&b| b == b' ').ok_or_else(|| bad("no length"))?;
            let len: usize = std::str::from_utf8(&bytes[..space])
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad("the length is not a number"))?;
            if len <= space + 1 || len > bytes.len() || bytes[len - 1] != b'\n' {
                return Err(bad("the length does not end the record at a newline"));
            }
            let record = &bytes[space + 1..len - 1];
            let eq = record.iter().position(|&b| b == b'=').ok_or_else(|| bad("no `=`"))?;
            let (key, value) = (&record[..eq], &record[eq + 1..]);
            match key {
                b"path" => pax.path = Some(String::from_utf8_lossy(value).into_owned()),
                b"size" => {
                    let size = std::str::from_utf8(value)
                        .ok()
                        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| bad("the size is not a number"))?;
                    pax.size = Some(size);
                }
                k if k.starts_with(b"GNU.sparse.") => pax.sparse = true,
                _ => {}
            }
            bytes = &bytes[len..];
        }
        Ok(pax)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_tar_writers_write_them() {
        assert_eq!(octal(b"0000644\0"), Some(0o644));
        assert_eq!(octal(b"   644 \0"), Some(0o644));
        assert_eq!(octal(b"00000000017\0"), Some(15));
        assert_eq!(octal(b"\0\0\0\0"), None, "no digits");
        assert_eq!(octal(b"0009\0"), None, "not octal");
        assert_eq!(octal(b"12 3\0"), None, "digits after the end");
        assert_eq!(octal(b"77777777777777777777777"), None, "overflows");
        let mut big = [0u8; 12];
        big[0] = 0x80;
        big[4..].copy_from_slice(&(10u64 << 33).to_be_bytes());
        assert_eq!(number(&big), Some(10 << 33), "base-256 beyond 8 GiB");
        big[0] = 0xff;
        assert_eq!(number(&big), None, "negative");
        let mut huge = [0xffu8; 12];
        huge[0] = 0x80;
        assert_eq!(number(&huge), None, "beyond 64 bits");
    }

    #[test]
    fn pax_records_are_checked() {
        let p = Pax::parse(b"33 path=dir/a-very-long-name.jpg\n12 size=123\n").unwrap();
        assert_eq!((p.path.as_deref(), p.size, p.sparse), (Some("dir/a-very-long-name.jpg"), Some(123), false));
        assert!(Pax::parse(b"22 GNU.sparse.major=1\n").unwrap().sparse);
        assert_eq!(Pax::parse(b"13 mtime=1.5\n\0\0\0").unwrap(), Pax::default(), "trailing NULs");
        for bad in [&b"99 path=x\n"[..], b"8 path=x\n", b"x path=x\n", b"9 pathx\n\n", b" 8 a=b\n", b"11 size=1a\n"] {
            let e = Pax::parse(bad).unwrap_err();
            assert!(e.contains("malformed record at byte 0"), "{e}");
        }
        assert_eq!(Pax::parse(b"9 path=x\n").unwrap().path.as_deref(), Some("x"));
        assert!(Pax::parse(b"9 path=x\n0 a").unwrap_err().contains("at byte 9"));
    }
}
