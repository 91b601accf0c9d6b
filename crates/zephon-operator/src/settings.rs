//! Settings in a canonical encoding: what an operator's (or a source's) fingerprint is made of.
//!
//! A fingerprint decides whether a checkpoint restores into a pipeline, so it must be the same
//! bytes for the same settings on every build, forever. Derived `Debug` output cannot promise
//! that (its format is Rust's to change), so settings are written here as typed values and
//! encoded by rules this crate owns and tests against fixed bytes.
//!
//! The encoding is documented on [`Settings`].

use std::fmt::{self, Write as _};

use crate::digest::Digest;

/// The version of the settings encoding, recorded in run fingerprints.
pub const SETTINGS_VERSION: u32 = 1;

/// One setting's value.
#[derive(Clone, Debug, PartialEq)]
pub enum SettingsValue {
    /// Absent (an optional setting left unset).
    None,
    /// A flag.
    Bool(bool),
    /// A count, size or id.
    Unsigned(u64),
    /// A signed number.
    Signed(i64),
    /// A real number (compared by its bits; see the encoding on [`Settings`]).
    Float(f64),
    /// A name, path, or any text.
    Text(String),
    /// An ordered list.
    List(Vec<SettingsValue>),
    /// Named values (encoded sorted by name).
    Map(Vec<(String, SettingsValue)>),
    /// The settings of a part (an inner operator, a dataset's stream).
    Settings(Settings),
}

/// Every setting that changes the output of an operator or a source, typed, with a canonical
/// byte encoding and a readable text form.
///
/// # The encoding (version [`SETTINGS_VERSION`])
/// All integers little-endian. A *string* is its UTF-8 length as `u32` then its bytes.
/// - Settings: the string `kind`, the `u32` version, the `u32` number of entries, then each
///   entry as its name (a string) and its value, **sorted by name** (so the order a builder
///   sets them in does not matter; a name set twice keeps the last value).
/// - A value is a tag byte and a body: `0` none (no body); `1` bool (one byte, 0 or 1); `2`
///   unsigned (`u64`); `3` signed (`i64`); `4` float (the `f64`'s IEEE bits as `u64`; every NaN
///   is written as `0x7ff8000000000000` and `-0.0` as `0.0`); `5` text (a string); `6` list
///   (`u32` count, then the values); `7` map (`u32` count, then name and value for each, sorted
///   by name); `8` nested settings (as above).
///
/// The text form ([`Settings::to_text`], `pack/v1 algorithm="best_fit" seq_len=1024`) is for
/// people (plans, mismatch messages): it lists entries in the order they were set, which the
/// author chose to read well; it is derived from the same values, and comparisons use the
/// bytes.
///
/// # Example
/// ```
/// use zephon_operator::Settings;
/// let s = Settings::new("pack", 1).set("seq_len", 1024u32).set("algorithm", "best_fit");
/// assert_eq!(s.to_text(), r#"pack/v1 seq_len=1024 algorithm="best_fit""#);
/// assert_eq!(s, Settings::new("pack", 1).set("algorithm", "best_fit").set("seq_len", 1024u32));
/// ```
#[derive(Clone, Debug)]
pub struct Settings {
    kind: String,
    version: u32,
    entries: Vec<(String, SettingsValue)>,
}

impl Settings {
    /// Empty settings of `kind` (the operator's name in plans), at `version`: bump the version
    /// when the operator's output changes for the same settings.
    pub fn new(kind: &str, version: u32) -> Self {
        Settings { kind: kind.to_string(), version, entries: Vec::new() }
    }

    /// Sets `name` to `value`, replacing an earlier value of the same name.
    #[must_use]
    pub fn set(mut self, name: &str, value: impl Into<SettingsValue>) -> Self {
        let value = value.into();
        match self.entries.iter_mut().find(|(n, _)| n == name) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((name.to_string(), value)),
        }
        self
    }

    /// The kind given to [`Settings::new`].
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The version given to [`Settings::new`].
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&SettingsValue> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// The entries, sorted by name.
    pub fn entries(&self) -> Vec<(&str, &SettingsValue)> {
        let mut e: Vec<(&str, &SettingsValue)> = self.entries.iter().map(|(n, v)| (n.as_str(), v)).collect();
        e.sort_by(|a, b| a.0.cmp(b.0));
        e
    }

    /// The canonical bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// The SHA-256 of [`Settings::encode`].
    pub fn digest(&self) -> Digest {
        Digest::of(&self.encode())
    }

    /// The readable form: `kind/vN` then `name=value` for each entry, in the order set.
    pub fn to_text(&self) -> String {
        self.to_string()
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        put_str(out, &self.kind);
        out.extend_from_slice(&self.version.to_le_bytes());
        let entries = self.entries();
        put_len(out, entries.len());
        for (name, value) in entries {
            put_str(out, name);
            value.encode_into(out);
        }
    }
}

impl PartialEq for Settings {
    fn eq(&self, other: &Self) -> bool {
        self.encode() == other.encode()
    }
}

impl fmt::Display for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/v{}", self.kind, self.version)?;
        for (name, value) in &self.entries {
            write!(f, " {name}={value}")?;
        }
        Ok(())
    }
}

impl SettingsValue {
    fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            SettingsValue::None => out.push(0),
            SettingsValue::Bool(b) => out.extend_from_slice(&[1, u8::from(*b)]),
            SettingsValue::Unsigned(v) => {
                out.push(2);
                out.extend_from_slice(&v.to_le_bytes());
            }
            SettingsValue::Signed(v) => {
                out.push(3);
                out.extend_from_slice(&v.to_le_bytes());
            }
            SettingsValue::Float(v) => {
                out.push(4);
                out.extend_from_slice(&canonical_bits(*v).to_le_bytes());
            }
            SettingsValue::Text(s) => {
                out.push(5);
                put_str(out, s);
            }
            SettingsValue::List(items) => {
                out.push(6);
                put_len(out, items.len());
                for item in items {
                    item.encode_into(out);
                }
            }
            SettingsValue::Map(entries) => {
                out.push(7);
                let mut sorted: Vec<&(String, SettingsValue)> = entries.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(&b.0));
                put_len(out, sorted.len());
                for (name, value) in sorted {
                    put_str(out, name);
                    value.encode_into(out);
                }
            }
            SettingsValue::Settings(s) => {
                out.push(8);
                s.encode_into(out);
            }
        }
    }
}

impl fmt::Display for SettingsValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingsValue::None => f.write_str("none"),
            SettingsValue::Bool(b) => write!(f, "{b}"),
            SettingsValue::Unsigned(v) => write!(f, "{v}"),
            SettingsValue::Signed(v) => write!(f, "{v}"),
            SettingsValue::Float(v) => write!(f, "{v}"),
            SettingsValue::Text(s) => write_quoted(f, s),
            SettingsValue::List(items) => {
                f.write_char('[')?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_char(']')
            }
            SettingsValue::Map(entries) => {
                let mut sorted: Vec<&(String, SettingsValue)> = entries.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(&b.0));
                f.write_char('{')?;
                for (i, (name, value)) in sorted.into_iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{name}={value}")?;
                }
                f.write_char('}')
            }
            SettingsValue::Settings(s) => write!(f, "({s})"),
        }
    }
}

/// Quotes text with escapes this crate defines: `\\`, `\"`, and `\u{..}` for control characters.
fn write_quoted(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            c if c.is_control() => write!(f, "\\u{{{:x}}}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

fn canonical_bits(v: f64) -> u64 {
    if v.is_nan() {
        0x7ff8_0000_0000_0000
    } else if v == 0.0 {
        0
    } else {
        v.to_bits()
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    // Settings are small; a length past u32 is a bug in the caller, encoded saturated rather
    // than wrapped so that it can never collide with a shorter value silently.
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

macro_rules! from_unsigned {
    ($($t:ty),*) => {$(
        impl From<$t> for SettingsValue {
            fn from(v: $t) -> Self { SettingsValue::Unsigned(v as u64) }
        }
    )*};
}
from_unsigned!(u8, u16, u32, u64, usize);

macro_rules! from_signed {
    ($($t:ty),*) => {$(
        impl From<$t> for SettingsValue {
            fn from(v: $t) -> Self { SettingsValue::Signed(v as i64) }
        }
    )*};
}
from_signed!(i8, i16, i32, i64);

impl From<bool> for SettingsValue {
    fn from(v: bool) -> Self {
        SettingsValue::Bool(v)
    }
}

impl From<f64> for SettingsValue {
    fn from(v: f64) -> Self {
        SettingsValue::Float(v)
    }
}

impl From<f32> for SettingsValue {
    fn from(v: f32) -> Self {
        SettingsValue::Float(f64::from(v))
    }
}

impl From<&str> for SettingsValue {
    fn from(v: &str) -> Self {
        SettingsValue::Text(v.to_string())
    }
}

impl From<String> for SettingsValue {
    fn from(v: String) -> Self {
        SettingsValue::Text(v)
    }
}

impl From<&String> for SettingsValue {
    fn from(v: &String) -> Self {
        SettingsValue::Text(v.clone())
    }
}

impl From<Digest> for SettingsValue {
    fn from(v: Digest) -> Self {
        SettingsValue::Text(v.to_hex())
    }
}

impl From<Settings> for SettingsValue {
    fn from(v: Settings) -> Self {
        SettingsValue::Settings(v)
    }
}

impl<T: Into<SettingsValue>> From<Option<T>> for SettingsValue {
    fn from(v: Option<T>) -> Self {
        v.map_or(SettingsValue::None, Into::into)
    }
}

impl<T: Into<SettingsValue>> From<Vec<T>> for SettingsValue {
    fn from(v: Vec<T>) -> Self {
        SettingsValue::List(v.into_iter().map(Into::into).collect())
    }
}

impl<T: Clone + Into<SettingsValue>> From<&[T]> for SettingsValue {
    fn from(v: &[T]) -> Self {
        SettingsValue::List(v.iter().cloned().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encoding is a promise: these bytes are written out by hand from the module's rules.
    #[test]
    fn fixed_settings_give_fixed_bytes() {
        let s = Settings::new("pk", 2)
            .set("n", 5u32)
            .set("a", "x")
            .set("f", 1.5f64)
            .set("o", Option::<u32>::None)
            .set("l", vec![true, false])
            .set("s", -2i64);
        let mut want: Vec<u8> = vec![2, 0, 0, 0, b'p', b'k', 2, 0, 0, 0, 6, 0, 0, 0];
        want.extend_from_slice(&[1, 0, 0, 0, b'a', 5, 1, 0, 0, 0, b'x']);
        want.extend_from_slice(&[1, 0, 0, 0, b'f', 4, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f]);
        want.extend_from_slice(&[1, 0, 0, 0, b'l', 6, 2, 0, 0, 0, 1, 1, 1, 0]);
        want.extend_from_slice(&[1, 0, 0, 0, b'n', 2, 5, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[1, 0, 0, 0, b'o', 0]);
        want.extend_from_slice(&[1, 0, 0, 0, b's', 3, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(s.encode(), want);
        assert_eq!(s.to_text(), r#"pk/v2 n=5 a="x" f=1.5 o=none l=[true, false] s=-2"#);
        assert_eq!(s.digest().to_hex(), Digest::of(&want).to_hex(), "the digest is the SHA-256 of the bytes above");
    }

    #[test]
    fn order_of_setting_does_not_matter_and_types_do() {
        let a = Settings::new("k", 1).set("x", 1u32).set("y", "z");
        let b = Settings::new("k", 1).set("y", "z").set("x", 1u64);
        assert_eq!(a, b);
        assert_ne!(a, Settings::new("k", 1).set("x", 1i64).set("y", "z"), "signed and unsigned differ");
        assert_ne!(a, Settings::new("k", 2).set("x", 1u32).set("y", "z"), "the version counts");
        assert_eq!(Settings::new("k", 1).set("x", 1u32).set("x", 2u32), Settings::new("k", 1).set("x", 2u32));
    }

    #[test]
    fn floats_compare_by_canonical_bits_and_text_is_escaped() {
        let z = |v: f64| Settings::new("k", 1).set("v", v);
        assert_eq!(z(0.0), z(-0.0));
        assert_eq!(z(f64::NAN), z(-f64::NAN));
        assert_ne!(z(0.1), z(0.1 + f64::EPSILON));
        let t = Settings::new("k", 1).set("t", "a\"b\\c\n");
        assert_eq!(t.to_text(), r#"k/v1 t="a\"b\\c\u{a}""#);
        let nested = Settings::new("outer", 1).set(
            "inner",
            Settings::new("in", 3)
                .set("m", SettingsValue::Map(vec![("b".into(), 2u8.into()), ("a".into(), 1u8.into())])),
        );
        assert_eq!(nested.to_text(), "outer/v1 inner=(in/v3 m={a=1, b=2})");
    }
}
