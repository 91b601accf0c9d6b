//! GPT-2's pre-tokenization, written out by hand.
//!
//! Byte-level BPE cuts text into pieces with the regex
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`. The lookahead
//! makes `fancy-regex` run it on a backtracking machine whose stack grows with the length of a
//! whitespace run: at about a million spaces it fails ("Max stack size exceeded"), and the
//! `tokenizers` crate then silently stops splitting (the rest of the text becomes one piece).
//! A data loader meets such documents (padding, ASCII art, broken scrapes), so the fast path
//! and the reference path both use this module instead when the regex cannot.
//!
//! What the regex matches, read as a leftmost-first alternation (every character is a letter,
//! a number, whitespace or "other", so the matches tile the text without gaps):
//!
//! * `'` followed by `s t m d` or `re ve ll` (case-sensitive): that contraction;
//! * a letter, number or other character, optionally preceded by one U+0020 space: the space
//!   and the maximal run of that class (`'` is "other", so `!'x` is one piece `!'`);
//! * a whitespace run `[i, j)` that reaches the end of the text: all of it;
//! * a whitespace run followed by a non-whitespace character: `\s+(?!\S)` backtracks one
//!   character, so the run minus its last character is one piece (when that is not empty);
//!   the last character then starts the next piece: a U+0020 space joins the word after it,
//!   any other whitespace character (`\n`, `\t`, U+00A0...) is a piece of its own (`\s+`).
//!
//! The character classes come from `regex-syntax`, the crate `fancy-regex` delegates
//! `\s`, `\p{L}` and `\p{N}` to, so both agree on every Unicode version they share.

use std::sync::LazyLock;

use regex_syntax::hir::{Class as HirClass, HirKind};

/// The pre-tokenization regex of GPT-2, as `tokenizers`' `ByteLevel` and tiktoken use it.
pub(crate) const GPT2_PATTERN: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// The class of a character for the GPT-2 pattern.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum Class {
    /// Neither whitespace, letter nor number: `[^\s\p{L}\p{N}]`.
    Other = 0,
    /// `\p{L}`.
    Letter = 1,
    /// `\p{N}`.
    Number = 2,
    /// `\s` (Unicode `White_Space`).
    Space = 3,
}

/// Classes of every code point: a byte per BMP code point, sorted ranges above it.
struct Classes {
    bmp: Box<[u8]>,
    astral: Vec<(u32, u32, Class)>,
}

/// Built once per process (64 KiB); `None` if `regex-syntax` cannot give the classes, in
/// which case the callers keep using the regex.
static CLASSES: LazyLock<Option<Classes>> = LazyLock::new(|| Classes::build().ok());

impl Classes {
    fn build() -> Result<Classes, String> {
        let mut bmp = vec![Class::Other as u8; 0x10000].into_boxed_slice();
        let mut astral = Vec::new();
        for (pattern, class) in [(r"\p{L}", Class::Letter), (r"\p{N}", Class::Number), (r"\s", Class::Space)] {
            for (lo, hi) in unicode_ranges(pattern)? {
                for c in lo..=hi.min(0xFFFF) {
                    bmp[c as usize] = class as u8;
                }
                if hi > 0xFFFF {
                    astral.push((lo.max(0x10000), hi, class));
                }
            }
        }
        astral.sort_unstable_by_key(|r| r.0);
        Ok(Classes { bmp, astral })
    }

    #[inline]
    fn of(&self, c: char) -> Class {
        let c = c as u32;
        if c < 0x10000 {
            // The table holds only the four discriminants written in `build`.
            match self.bmp[c as usize] {
                1 => Class::Letter,
                2 => Class::Number,
                3 => Class::Space,
                _ => Class::Other,
            }
        } else {
            match self.astral.binary_search_by(|r| {
                if r.1 < c {
                    std::cmp::Ordering::Less
                } else if r.0 > c {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            }) {
                Ok(i) => self.astral[i].2,
                Err(_) => Class::Other,
            }
        }
    }
}

/// The code point ranges of a Unicode class such as `\p{L}`, as `regex-syntax` defines it.
fn unicode_ranges(pattern: &str) -> Result<Vec<(u32, u32)>, String> {
    let hir = regex_syntax::ParserBuilder::new().unicode(true).build().parse(pattern).map_err(|e| e.to_string())?;
    match hir.kind() {
        HirKind::Class(HirClass::Unicode(class)) => {
            Ok(class.ranges().iter().map(|r| (r.start() as u32, r.end() as u32)).collect())
        }
        _ => Err(format!("{pattern} is not a Unicode class")),
    }
}

/// Whether `c` is `\s` (Unicode `White_Space`, by `regex-syntax`'s tables).
pub(crate) fn is_space(c: char) -> bool {
    if c.is_ascii() {
        return ASCII[c as usize] == Class::Space;
    }
    match CLASSES.as_ref() {
        Some(classes) => classes.of(c) == Class::Space,
        None => c.is_whitespace(),
    }
}

/// GPT-2's pre-tokenizer; see the module docs for the rules.
#[derive(Copy, Clone)]
pub(crate) struct Gpt2 {
    classes: &'static Classes,
}

impl Gpt2 {
    /// The splitter, or `None` when the Unicode tables are unavailable.
    pub(crate) fn new() -> Option<Gpt2> {
        CLASSES.as_ref().map(|classes| Gpt2 { classes })
    }

    /// The character at byte `i` of `s` and its class and length; `i` is on a boundary.
    #[inline]
    fn at(&self, s: &str, i: usize) -> (char, Class, usize) {
        let b = s.as_bytes()[i];
        if b < 0x80 {
            return (b as char, ASCII[b as usize], 1);
        }
        match s[i..].chars().next() {
            Some(c) => (c, self.classes.of(c), c.len_utf8()),
            // Unreachable for a boundary inside the text; treat as the end.
            None => ('\0', Class::Other, s.len() - i),
        }
    }

    /// The end of the maximal run of `class` starting at byte `i`.
    #[inline]
    fn run(&self, s: &str, mut i: usize, class: Class) -> usize {
        let bytes = s.as_bytes();
        while i < bytes.len() {
            // ASCII bytes decide without decoding; the common case for Latin text.
            let b = bytes[i];
            if b < 0x80 {
                if ASCII[b as usize] != class {
                    break;
                }
                i += 1;
            } else {
                let (_, k, n) = self.at(s, i);
                if k != class {
                    break;
                }
                i += n;
            }
        }
        i
    }

    /// The end of the piece that starts at byte `i` of `s` (`i < s.len()`, on a boundary).
    pub(crate) fn piece_end(&self, s: &str, i: usize) -> usize {
        let bytes = s.as_bytes();
        let (c, class, n) = self.at(s, i);
        if c == '\'' {
            let rest = &bytes[i + 1..];
            match rest {
                [b's' | b't' | b'm' | b'd', ..] => return i + 2,
                [b'r', b'e', ..] | [b'v', b'e', ..] | [b'l', b'l', ..] => return i + 3,
                _ => {}
            }
        }
        if c == ' ' && i + 1 < s.len() {
            let (_, next, _) = self.at(s, i + 1);
            if next != Class::Space {
                return self.run(s, i + 1, next);
            }
        }
        if class != Class::Space {
            return self.run(s, i + n, class);
        }
        // A whitespace run: find its end and the start of its last character.
        let (mut j, mut last) = (i, i);
        while j < bytes.len() {
            let (_, k, m) = self.at(s, j);
            if k != Class::Space {
                break;
            }
            last = j;
            j += m;
        }
        if j == bytes.len() || last == i { j } else { last }
    }

    /// The pieces of `s`, in order; they tile `s`.
    pub(crate) fn pieces<'s>(&self, s: &'s str) -> Pieces<'s> {
        Pieces { gpt2: *self, s, at: 0 }
    }
}

/// Iterator over the pieces of a text.
pub(crate) struct Pieces<'s> {
    gpt2: Gpt2,
    s: &'s str,
    at: usize,
}

impl<'s> Iterator for Pieces<'s> {
    type Item = (usize, usize);
    fn next(&mut self) -> Option<(usize, usize)> {
        if self.at >= self.s.len() {
            return None;
        }
        let start = self.at;
        self.at = self.gpt2.piece_end(self.s, start);
        Some((start, self.at))
    }
}

/// The class of each ASCII character (the same as the Unicode tables give; checked in tests).
static ASCII: [Class; 128] = {
    let mut t = [Class::Other; 128];
    let mut c = 0;
    while c < 128 {
        let b = c as u8;
        t[c] = if b.is_ascii_alphabetic() {
            Class::Letter
        } else if b.is_ascii_digit() {
            Class::Number
        } else if matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r') {
            Class::Space
        } else {
            Class::Other
        };
        c += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_table_equals_the_unicode_tables() {
        let classes = CLASSES.as_ref().unwrap();
        for b in 0u8..128 {
            assert_eq!(ASCII[b as usize], classes.of(b as char), "byte {b}");
        }
    }

    /// The pieces of the hand-written splitter equal fancy-regex's matches (which tile the
    /// text) on text that stays within the regex's limits.
    #[test]
    fn equals_the_regex_on_every_rule() {
        let regex = fancy_regex::Regex::new(GPT2_PATTERN).unwrap();
        let gpt2 = Gpt2::new().unwrap();
        let atoms = [
            "a", "Z", "é", "日本", " ", "  ", "\n", "\t", "\r\n", "\u{a0}", "\u{3000}", "\u{2028}", "'", "'s", "'S",
            "'re", "'ll", "'d", "'x", "1", "٣", "Ⅻ", "½", "!", "?!", "\u{301}", "🙂", "\u{200d}", "x", "\u{85}",
        ];
        let texts = crate::test_texts::atom_texts(&atoms, 7, 20_000);
        assert!(texts.len() > 40_000, "{}", texts.len());
        for text in &texts {
            let text = text.as_str();
            let want: Vec<(usize, usize)> =
                regex.find_iter(text).map(|m| m.map(|m| (m.start(), m.end())).unwrap()).collect();
            let got: Vec<(usize, usize)> = gpt2.pieces(text).collect();
            assert_eq!(got, want, "{text:?}");
        }
    }
}
