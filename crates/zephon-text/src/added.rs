//! Added tokens (`<|endoftext|>`, chat markers...) found in text the way `tokenizers` finds them.
//!
//! `tokenizers` splits them out before anything else, in two passes, each one automaton
//! searched leftmost-longest: first the tokens with `normalized: false` over the raw text,
//! then the tokens with `normalized: true` over each gap the first pass left (after
//! normalization, which the fast path only accepts when there is none). When special tokens
//! are to be read as text (`encode_special_tokens`), a special match is skipped *after* the
//! automaton found it: its bytes stay text and the search resumes after it, so a shorter
//! token inside it is not found either. The fast path copies all of this, with one automaton
//! per pass, so the cost does not grow with the number of added tokens.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, MatchKind};

/// One pass's automaton and, per pattern, the token's id and whether it is special.
struct Pass {
    automaton: AhoCorasick,
    tokens: Vec<(u32, bool)>,
}

/// The added tokens of a tokenizer, as automata.
pub(crate) struct AddedTokens {
    raw: Option<Pass>,
    normalized: Option<Pass>,
}

/// A part of the text: plain text to pre-tokenize, or an added token's id.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Segment<'t> {
    /// Text between added tokens.
    Text(&'t str),
    /// An added token.
    Token(u32),
}

/// An added token as the automata need it.
pub(crate) struct Added {
    /// What it matches in the text.
    pub content: String,
    /// Its id.
    pub id: u32,
    /// Whether it is special (a control token).
    pub special: bool,
    /// Whether it is matched in the second pass (normalized text).
    pub normalized: bool,
}

impl AddedTokens {
    /// Builds both passes' automata.
    pub(crate) fn new(tokens: &[Added]) -> Result<AddedTokens, String> {
        let pass = |normalized: bool| -> Result<Option<Pass>, String> {
            let chosen: Vec<&Added> = tokens.iter().filter(|t| t.normalized == normalized).collect();
            if chosen.is_empty() {
                return Ok(None);
            }
            let automaton = AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(chosen.iter().map(|t| t.content.as_str()))
                .map_err(|e| format!("added tokens: {e}"))?;
            Ok(Some(Pass { automaton, tokens: chosen.iter().map(|t| (t.id, t.special)).collect() }))
        };
        Ok(AddedTokens { raw: pass(false)?, normalized: pass(true)? })
    }

    /// Whether there are no added tokens at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.raw.is_none() && self.normalized.is_none()
    }

    /// Calls `f` on the segments of `text` in order until it returns `false`; returns whether
    /// it never did. Special tokens are text unless `special` is set. With `nfc`, the text
    /// between non-normalized tokens is NFC-normalized before the normalized tokens are
    /// searched in it, and reaches `f` normalized.
    pub(crate) fn segments<E>(
        &self,
        text: &str,
        special: bool,
        nfc: bool,
        f: &mut impl FnMut(Segment<'_>) -> Result<bool, E>,
    ) -> Result<bool, E> {
        self.pass(self.raw.as_ref(), text, special, &mut |seg| match seg {
            Segment::Text(gap) => {
                let gap = if nfc { crate::nfc::nfc(gap) } else { Cow::Borrowed(gap) };
                self.pass(self.normalized.as_ref(), &gap, special, f)
            }
            token => f(token),
        })
    }

    /// One pass: the matches of `pass` in `text` as tokens, the rest as text.
    fn pass<E>(
        &self,
        pass: Option<&Pass>,
        text: &str,
        special: bool,
        f: &mut impl FnMut(Segment<'_>) -> Result<bool, E>,
    ) -> Result<bool, E> {
        if text.is_empty() {
            return Ok(true);
        }
        let Some(pass) = pass else { return f(Segment::Text(text)) };
        let mut at = 0;
        for m in pass.automaton.find_iter(text) {
            let (id, is_special) = pass.tokens[m.pattern().as_usize()];
            if is_special && !special {
                continue;
            }
            if m.start() > at && !f(Segment::Text(&text[at..m.start()]))? {
                return Ok(false);
            }
            at = m.end();
            if !f(Segment::Token(id))? {
                return Ok(false);
            }
        }
        if at < text.len() {
            return f(Segment::Text(&text[at..]));
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn added(content: &str, id: u32, special: bool, normalized: bool) -> Added {
        Added { content: content.into(), id, special, normalized }
    }

    fn split(tokens: &AddedTokens, text: &str, special: bool) -> Vec<String> {
        let mut out = Vec::new();
        tokens
            .segments::<()>(text, special, false, &mut |s| {
                out.push(match s {
                    Segment::Text(t) => format!("{t:?}"),
                    Segment::Token(id) => format!("#{id}"),
                });
                Ok(true)
            })
            .unwrap();
        out
    }

    #[test]
    fn leftmost_longest_raw_first_and_skipped_specials() {
        let t = AddedTokens::new(&[
            added("<s>", 1, true, false),
            added("<s>x", 2, false, false),
            added("s>", 3, false, true),
            added("ab", 4, false, true),
        ])
        .unwrap();
        assert_eq!(split(&t, "a<s>xab<s>b", true), ["\"a\"", "#2", "#4", "#1", "\"b\""]);
        // Read as text, `<s>` stays text and hides nothing: `s>` inside it is not a match of
        // the raw pass, but the normalized pass sees the gap and finds it.
        assert_eq!(split(&t, "<s>b", false), ["\"<\"", "#3", "\"b\""]);
        assert_eq!(split(&t, "", true), Vec::<String>::new());
    }
}
