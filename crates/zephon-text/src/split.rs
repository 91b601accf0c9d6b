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

use regex::Regex;

/// The tail every supported pattern ends with.
const TAIL: &str = r"|\s+(?!\S)|\s+";

/// A split regex of the family, ready to run without backtracking.
#[derive(Clone, Debug)]
pub(crate) struct RegexSplit {
    /// `(?:A)|\s+`.
    full: Regex,
    /// `^(?:A)`: whether an earlier alternative matches at a position.
    head: Regex,
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
        Some(RegexSplit { full: lazy_dfa(&format!(r"(?:{head})|\s+"))?, head: lazy_dfa(&format!("^(?:{head})"))? })
    }

    /// The matches of the original pattern in `text`, in order, as (start, end).
    pub(crate) fn find_iter<'a>(&'a self, text: &'a str) -> Matches<'a> {
        Matches { split: self, text, base: 0, inner: self.full.find_iter(text) }
    }
}

/// A regex whose lazy DFA may keep up to 32 MiB of states on each thread. The default
/// (2 MiB) is too small for the Unicode classes of these patterns (GPT-4o's splits letters by
/// case): the DFA filled, was cleared and built its states again every few texts.
pub(crate) fn lazy_dfa(pattern: &str) -> Option<Regex> {
    regex::RegexBuilder::new(pattern).dfa_size_limit(32 << 20).build().ok()
}

/// The matches of a [`RegexSplit`].
///
/// One search of `full` runs over the text from `base` on, so that the regex takes its
/// per-thread state once, not once per piece. Slicing the text there changes no match: the
/// patterns of the family look at nothing outside their match.
pub(crate) struct Matches<'a> {
    split: &'a RegexSplit,
    text: &'a str,
    base: usize,
    inner: regex::Matches<'a, 'a>,
}

impl Iterator for Matches<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        let m = self.inner.next()?;
        let (start, mut end) = (self.base + m.start(), self.base + m.end());
        let run = &self.text[start..end];
        // A match of the `\s+` branch starts with whitespace (by the tables the regex uses)
        // and no earlier alternative matches there. A match is only ever shortened when it
        // is followed by more text (then, by greediness, by a non-space).
        if end < self.text.len() && run.chars().next().is_some_and(crate::pretok::is_space) {
            // The last character, if the run has more than one.
            let last = run.char_indices().next_back().map_or(0, |(i, _)| i);
            if last > 0 && !self.split.head.is_match(run) {
                end = start + last;
                // The character given back starts the next match: search again from there.
                self.base = end;
                self.inner = self.split.full.find_iter(&self.text[end..]);
            }
        }
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
