//! The envelope every checkpoint part travels in: a short text header that says what the bytes
//! are and proves them whole, then the deflated body.
//!
//! ```text
//! <MAGIC>
//! format <FORMAT_VERSION>
//! length <body bytes>
//! sha256 <hex of the body>
//! <body: deflate of the raw bytes>
//! ```

use zephon_operator::Digest;

use super::FORMAT_VERSION;

/// The most bytes a body may inflate to: beyond it the part is refused as corrupt rather than
/// allowed to exhaust memory.
const MAX_INFLATED: usize = 1 << 30;

/// `raw` deflated inside the envelope named `magic`.
pub(super) fn seal(magic: &str, raw: &[u8]) -> Vec<u8> {
    let packed = miniz_oxide::deflate::compress_to_vec(raw, 9);
    let mut bytes =
        format!("{magic}\nformat {FORMAT_VERSION}\nlength {}\nsha256 {}\n", packed.len(), Digest::of(&packed).to_hex())
            .into_bytes();
    bytes.extend_from_slice(&packed);
    bytes
}

/// The raw bytes inside an envelope named `magic`, after checking its magic, format version,
/// length and checksum. The error says what is wrong, for the caller to name the part.
pub(super) fn unseal(magic: &str, what: &str, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut rest: &[u8] = bytes;
    let mut line = |name: &str| -> Result<String, String> {
        let nl = rest.iter().position(|&b| b == b'\n').ok_or_else(|| format!("truncated before the {name} line"))?;
        let l = std::str::from_utf8(&rest[..nl]).map_err(|_| format!("the {name} line is not text"))?.to_string();
        rest = &rest[nl + 1..];
        Ok(l)
    };
    if line("magic")? != magic {
        return Err(format!("not {what} (bad magic line)"));
    }
    let field = |l: String, key: &str| -> Result<String, String> {
        l.strip_prefix(key)
            .and_then(|v| v.strip_prefix(' '))
            .map(str::to_string)
            .ok_or_else(|| format!("expected a '{key}' line, found {l:?}"))
    };
    let format = field(line("format")?, "format")?;
    if format != FORMAT_VERSION.to_string() {
        return Err(format!(
            "format version {format}, this build reads version {FORMAT_VERSION}: the lanes' states \
             cannot be carried over; resume with the zephon version that wrote it (CHANGELOG.md \
             names the format each release writes)"
        ));
    }
    let length: usize =
        field(line("length")?, "length")?.parse().map_err(|_| "the length is not a number".to_string())?;
    let sum = field(line("sha256")?, "sha256")?;
    if rest.len() != length {
        return Err(format!("{} body bytes, the header says {length} (truncated or appended to)", rest.len()));
    }
    if Digest::of(rest).to_hex() != sum {
        return Err("checksum mismatch: the bytes are corrupt".into());
    }
    miniz_oxide::inflate::decompress_to_vec_with_limit(rest, MAX_INFLATED)
        .map_err(|e| format!("the body does not inflate: {e}"))
}

/// `json` and `tail` as one body: the JSON's length on a line of its own, the JSON, the tail.
pub(super) fn join(json: &[u8], tail: &[u8]) -> Vec<u8> {
    let mut raw = format!("{}\n", json.len()).into_bytes();
    raw.extend_from_slice(json);
    raw.extend_from_slice(tail);
    raw
}

/// The JSON and the tail of a body made by [`join`].
pub(super) fn split(raw: &[u8]) -> Result<(&[u8], &[u8]), String> {
    let nl = raw.iter().position(|&b| b == b'\n').ok_or_else(|| "the body has no JSON length line".to_string())?;
    let json_len: usize = std::str::from_utf8(&raw[..nl])
        .ok()
        .and_then(|l| l.parse().ok())
        .filter(|&n: &usize| n < raw.len() - nl)
        .ok_or_else(|| "the body's JSON length is not a number within the body".to_string())?;
    Ok(raw[nl + 1..].split_at(json_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_body_unseals_and_every_damage_is_named() {
        let raw = join(br#"{"a":1}"#, b"tail");
        let bytes = seal("TEST-MAGIC", &raw);
        let back = unseal("TEST-MAGIC", "a test part", &bytes).unwrap();
        assert_eq!(split(&back).unwrap(), (&br#"{"a":1}"#[..], &b"tail"[..]));
        assert!(unseal("OTHER", "a test part", &bytes).unwrap_err().contains("not a test part"));
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(unseal("TEST-MAGIC", "x", &flipped).unwrap_err().contains("checksum"));
        assert!(unseal("TEST-MAGIC", "x", &bytes[..bytes.len() - 1]).unwrap_err().contains("truncated"));
        for cut in 0..bytes.len() {
            assert!(unseal("TEST-MAGIC", "x", &bytes[..cut]).is_err());
        }
        let newer = String::from_utf8_lossy(&bytes).replacen(&format!("format {FORMAT_VERSION}"), "format 99", 1);
        assert!(unseal("TEST-MAGIC", "x", newer.as_bytes()).unwrap_err().contains("format version 99"));
    }
}
