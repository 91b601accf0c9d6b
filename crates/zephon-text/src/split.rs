//! Split regexes of the `...|\s+(?!\S)|\s+` family without backtracking.
//!
//! The pre-tokenization regexes of today's byte-level BPE files (GPT-2, Llama-3, GPT-4o,
//! Qwen, DeepSeek-V3) all end with `\s+(?!\S)|\s+`: a whitespace run, except that a run
//! followed by a non-space character gives its last character to the next piece. That
//! lookahead is the only part a finite automaton cannot run, and what makes `fancy-regex`
//! backtrack (and fail on a million spaces). Here the pattern runs as `(?:A)|\s+` in the
//! `regex` crate (linear time, same leftmost-first priorities and Unicode classes) and the
//! lookahead is applied afterwards: a match of the final `\s+` branch (all whitespace, and no
//! earlier alternative `A` matches where it starts) that is followed by a character and is
//! longer than one character gives its last character back. That is exactly what the
//! backtracking engine does: `\s+(?!\S)` retreats one character when the run is followed by
//! a non-space, and when nothing is left `\s+` takes the single character.

use std::sync::Mutex;

use regex::Regex;
use regex_automata::meta::{self, Cache};
use regex_automata::{Anchored, Input};

/// The tail every supported pattern ends with.
const TAIL: &str = r"|\s+(?!\S)|\s+";

/// A lazy DFA's states a thread may keep. The default (2 MiB) is too small for the Unicode
/// classes of these patterns (GPT-4o's splits letters by case): with it the DFA fills, is
/// cleared and builds its states again every few texts.
const DFA_CACHE: usize = 32 << 20;

/// A split regex of the family, ready to run without backtracking.
#[derive(Debug)]
pub(crate) struct RegexSplit {
    /// `(?:A)|\s+`.
    full: meta::Regex,
    /// `^(?:A)`: whether an earlier alternative matches at a position.
    head: meta::Regex,
    /// Search state of `full` and `head`, taken by one text's matches at a time and given
    /// back after: one lock per text, not per piece.
    caches: Mutex<Vec<(Cache, Cache)>>,
}

fn lazy_dfa_meta(pattern: &str) -> Option<meta::Regex> {
    meta::Regex::builder().configure(meta::Config::new().hybrid_cache_capacity(DFA_CACHE)).build(pattern).ok()
}

/// A `regex` regex with the same room for its lazy DFA as the family's.
pub(crate) fn lazy_dfa(pattern: &str) -> Option<Regex> {
    regex::RegexBuilder::new(pattern).dfa_size_limit(DFA_CACHE).build().ok()
}

impl RegexSplit {
    /// The splitter for `pattern`, or `None` when it is not of the family (no such tail, or
    /// its other alternatives need backtracking or look behind).
    pub(crate) fn new(pattern: &str) -> Option<RegexSplit> {
        let head = pattern.strip_suffix(TAIL)?;
        // Anchors and word boundaries look outside a match, which the check on a match's own
        // text below does not see.
        if !regex_syntax::parse(head).ok()?.properties().look_set().is_empty() {
            return None;
        }
        Some(RegexSplit {
            full: lazy_dfa_meta(&format!(r"(?:{head})|\s+"))?,
            head: lazy_dfa_meta(&format!("^(?:{head})"))?,
            caches: Mutex::new(Vec::new()),
        })
    }

    /// The matches of the original pattern in `text`, in order, as (start, end).
    pub(crate) fn find_iter<'a>(&'a self, text: &'a str) -> Matches<'a> {
        let caches = self.caches.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let caches = caches.unwrap_or_else(|| (self.full.create_cache(), self.head.create_cache()));
        Matches { split: self, text, at: 0, caches: Some(caches) }
    }
}

/// The matches of a [`RegexSplit`].
pub(crate) struct Matches<'a> {
    split: &'a RegexSplit,
    text: &'a str,
    at: usize,
    /// Given back to the split when the matches are dropped.
    caches: Option<(Cache, Cache)>,
}

impl Drop for Matches<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.caches.take() {
            self.split.caches.lock().unwrap_or_else(|p| p.into_inner()).push(c);
        }
    }
}

impl Iterator for Matches<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        if self.at >= self.text.len() {
            return None;
        }
        let (full, head) = self.caches.as_mut()?;
        // The family's alternatives cover every character, so a match almost always starts
        // where the last one ended: searched anchored there, the regex finds the match's end
        // and needs no reverse pass for its start. Where none starts there, the leftmost
        // match after (same priorities either way).
        let input = Input::new(self.text).range(self.at..);
        let m = (self.split.full.search_with(full, &input.clone().anchored(Anchored::Yes)))
            .or_else(|| self.split.full.search_with(full, &input))?;
        let (start, mut end) = (m.start(), m.end());
        let run = &self.text[start..end];
        // A match of the `\s+` branch starts with whitespace (by the tables the regex uses)
        // and no earlier alternative matches there. A match is only ever shortened when it
        // is followed by more text (then, by greediness, by a non-space).
        if end < self.text.len() && run.chars().next().is_some_and(crate::pretok::is_space) {
            // The last character, if the run has more than one.
            let last = run.char_indices().next_back().map_or(0, |(i, _)| i);
            if last > 0 && self.split.head.search_with(head, &Input::new(run).earliest(true)).is_none() {
                end = start + last;
            }
        }
        // Patterns of the family cannot match empty; if one did, step past it.
        self.at = if end == start { end + self.text[end..].chars().next().map_or(1, char::len_utf8) } else { end };
        Some((start, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pre-tokenizer patterns of GPT-2, Llama-3, Qwen, GPT-4o (o200k) and DeepSeek-V3.
    pub(crate) const PATTERNS: &[&str] = &[
        crate::pretok::GPT2_PATTERN,
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    ];

    /// Every sequence of up to three atoms and random longer ones: the same matches as
    /// `fancy-regex` for every pattern of the family.
    #[test]
    fn equals_fancy_regex() {
        let atoms = [
            "a", "Z", "é", "É", "ǅ", "ʰ", "日本", " ", "  ", "\n", "\r", "\t", "\r\n", "\u{a0}", "\u{3000}", "'", "'s",
            "'S", "'re", "'LL", "'d", "'x", "1", "12", "1234", "٣", "½", "!", "?!", "/", "\u{301}", "🙂", "\u{200d}",
            "x", "\u{85}", "$", "_", "-a", "A",
        ];
        let texts = crate::test_texts::atom_texts(&atoms, 11, 5_000);
        for pattern in PATTERNS {
            let fancy = fancy_regex::Regex::new(pattern).unwrap();
            let ours = RegexSplit::new(pattern).unwrap();
            for text in &texts {
                let want: Vec<(usize, usize)> =
                    fancy.find_iter(text).map(|m| m.map(|m| (m.start(), m.end())).unwrap()).collect();
                let got: Vec<(usize, usize)> = ours.find_iter(text).collect();
                assert_eq!(got, want, "{pattern}: {text:?}");
            }
        }
    }

    #[test]
    fn other_patterns_are_not_of_the_family() {
        assert!(RegexSplit::new(r"\p{N}{1,3}").is_none());
        assert!(RegexSplit::new(r"(?<=a)b|\s+(?!\S)|\s+").is_none());
        assert!(RegexSplit::new(r"^a|\s+(?!\S)|\s+").is_none());
    }
}
