//! An exact fast path for byte-level BPE tokenizers (GPT-2, Llama-3, GPT-4o, Qwen,
//! DeepSeek-V3 and their kin).
//!
//! The `tokenizers` crate builds an `Encoding` per call: a `String` per token, offsets,
//! masks. For the data loader only the ids matter, and the tokenizer is the pipeline's whole
//! CPU cost. This module re-implements exactly what `tokenizers` does for one family of
//! `tokenizer.json` files, producing ids only:
//!
//! 1. added tokens (e.g. `<|endoftext|>`) are split out of the text first, by one automaton
//!    per pass, with `tokenizers`' rules (see [`crate::added`]); the text between them is
//!    NFC-normalized when the file says so;
//! 2. the rest is cut into pieces: GPT-2's `ByteLevel` regex by a hand-written pre-tokenizer
//!    ([`crate::pretok`]), `Split` regexes of the `\s+(?!\S)` family by the `regex` crate with
//!    the lookahead applied afterwards ([`crate::split`]), other regular `Split` patterns by
//!    the `regex` crate: no backtracking, so a run of a million spaces is one piece like any
//!    other;
//! 3. each piece's bytes start as byte symbols, and the adjacent pair with the lowest merge
//!    rank (leftmost on ties) is merged until no listed merge applies (after a whole-piece
//!    vocabulary lookup with `ignore_merges`).
//!
//! It is used only when the file is of that family (no normalizer or NFC; a `ByteLevel`
//! pre-tokenizer without prefix space, or `Split`s (`Isolated`, or `Removed` inverted)
//! before a `ByteLevel` without regex; a `BPE` model without prefixes, suffixes or byte
//! fallback; every byte symbol in the vocabulary; added tokens without `single_word`,
//! `lstrip` or `rstrip`), and only after a self-check against `tokenizers` on text that
//! exercises every rule. Otherwise the `tokenizers` crate does the work; [`build`] says which
//! setting kept a file off the fast path. Tests compare the two on millions of real tokens
//! per family and on adversarial text.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::Value as Json;

use crate::added::{Added, AddedTokens, Segment};
use crate::merge_table::MergeTable;
use crate::nfc::nfc;
use crate::piece_cache::{self, PieceCache};
use crate::pretok::Gpt2;
use crate::split::RegexSplit;
use crate::vocab_table::VocabTable;

/// Pieces longer than this are merged with a priority queue instead of repeated scans.
const SCAN_LIMIT: usize = 64;

/// How text is cut into pieces before the merges.
enum Splitter {
    /// `ByteLevel` with its own regex: GPT-2's pattern, by hand.
    Gpt2(Gpt2),
    /// `Split` regexes (Llama-3, GPT-4o, Qwen, DeepSeek-V3), each applied to the pieces of the
    /// one before, then `ByteLevel` without a regex.
    Splits(Vec<SplitStep>),
}

/// One `Split` pre-tokenizer.
struct SplitStep {
    matcher: Matcher,
    /// `Isolated` keeps the text between matches as pieces; `Removed` with `invert` drops it.
    keep_gaps: bool,
}

/// A `Split` regex without backtracking.
enum Matcher {
    /// A pattern of the `...|\s+(?!\S)|\s+` family.
    Family(RegexSplit),
    /// A regular pattern (no lookaround): `fancy-regex` hands it to the `regex` crate whole.
    Plain(regex::Regex),
}

impl Matcher {
    fn for_each_match(&self, text: &str, f: &mut impl FnMut(usize, usize) -> bool) -> bool {
        match self {
            Matcher::Family(split) => split.find_iter(text).all(|(s, e)| f(s, e)),
            Matcher::Plain(regex) => regex.find_iter(text).all(|m| f(m.start(), m.end())),
        }
    }
}

impl Splitter {
    /// Calls `f` on the pieces of `text` in order until it returns `false`; whether it never did.
    fn pieces(&self, text: &str, f: &mut impl FnMut(&str) -> bool) -> bool {
        match self {
            Splitter::Gpt2(gpt2) => gpt2.pieces(text).all(|(s, e)| f(&text[s..e])),
            Splitter::Splits(steps) => split_steps(steps, text, f),
        }
    }
}

fn split_steps(steps: &[SplitStep], text: &str, f: &mut impl FnMut(&str) -> bool) -> bool {
    let Some((step, rest)) = steps.split_first() else {
        return text.is_empty() || f(text);
    };
    let mut at = 0;
    let go = step.matcher.for_each_match(text, &mut |start, end| {
        if step.keep_gaps && start > at && !split_steps(rest, &text[at..start], f) {
            return false;
        }
        at = end;
        split_steps(rest, &text[start..end], f)
    });
    go && (!step.keep_gaps || at >= text.len() || split_steps(rest, &text[at..], f))
}

/// The fast path's splitter for a pre-tokenizer, or why there is none.
fn splitter(pre: &Json) -> Result<Splitter, String> {
    let unsupported =
        || if pre.is_null() { "no pre-tokenizer".to_string() } else { format!("pre-tokenizer {}", describe(pre)) };
    if pre["type"] == "ByteLevel" {
        if pre["add_prefix_space"] != Json::Bool(false) {
            return Err("pre-tokenizer ByteLevel with add_prefix_space".into());
        }
        if pre["use_regex"] == Json::Bool(false) {
            return Err("pre-tokenizer ByteLevel without its regex".into());
        }
        return Gpt2::new().map(Splitter::Gpt2).ok_or("the Unicode tables of the pre-tokenizer are unavailable".into());
    }
    let list = pre["pretokenizers"].as_array().filter(|_| pre["type"] == "Sequence").ok_or_else(unsupported)?;
    let Some((last, splits)) = list.split_last() else { return Err(unsupported()) };
    if last["type"] != "ByteLevel"
        || last["use_regex"] != Json::Bool(false)
        || last["add_prefix_space"] != Json::Bool(false)
    {
        return Err(unsupported());
    }
    let mut steps = Vec::new();
    for split in splits {
        let pattern =
            split["pattern"]["Regex"].as_str().filter(|_| split["type"] == "Split").ok_or_else(unsupported)?;
        let keep_gaps = match (split["behavior"].as_str(), split["invert"].as_bool()) {
            (Some("Isolated"), Some(_)) => true,
            (Some("Removed"), Some(true)) => false,
            _ => {
                return Err(format!(
                    "pre-tokenizer Split with behavior {} (invert {})",
                    split["behavior"], split["invert"]
                ));
            }
        };
        let matcher = match RegexSplit::new(pattern) {
            Some(family) => Matcher::Family(family),
            None => {
                // A pattern `regex` cannot compile needs backtracking.
                let regex = crate::split::lazy_dfa(pattern)
                    .ok_or_else(|| format!("pre-tokenizer Split regex {pattern:?} needs backtracking"))?;
                Matcher::Plain(regex)
            }
        };
        steps.push(SplitStep { matcher, keep_gaps });
    }
    if steps.is_empty() {
        return Err(unsupported());
    }
    Ok(Splitter::Splits(steps))
}

/// The ids of a byte-level BPE tokenizer, computed without `tokenizers`' per-token objects.
pub(crate) struct ByteLevelBpe {
    split: Splitter,
    /// Id of each single byte.
    byte_ids: [u32; 256],
    /// (left id, right id) → (rank, merged id).
    merges: MergeTable,
    /// Whole pieces looked up before merging (`ignore_merges`).
    vocab_bytes: Option<VocabTable>,
    /// Added tokens.
    added: AddedTokens,
    /// Whether text is NFC-normalized (after the non-normalized added tokens are found).
    nfc: bool,
    /// Identifies this table in the per-thread cache.
    id: usize,
}

/// The GPT-2 byte ↔ unicode table: printable bytes map to themselves, the rest to U+0100....
pub(crate) fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u8 {
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        out[b as usize] = if printable {
            b as char
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap_or('\0')
        };
    }
    out
}

/// A short description of a component of a tokenizer.json: its type, with the types inside
/// a `Sequence` (`Sequence[Split, ByteLevel]`).
pub(crate) fn describe(node: &Json) -> String {
    let kind = node["type"].as_str().unwrap_or("?");
    let inner = ["normalizers", "pretokenizers", "processors", "decoders"].iter().find_map(|k| node[*k].as_array());
    match inner {
        Some(list) => format!("{kind}[{}]", list.iter().map(describe).collect::<Vec<_>>().join(", ")),
        None => kind.to_string(),
    }
}

/// Whether a normalizer does nothing (absent, or an empty `Sequence`).
fn no_normalizer(node: &Json) -> bool {
    node.is_null()
        || (node["type"] == "Sequence" && node["normalizers"].as_array().is_some_and(|l| l.iter().all(no_normalizer)))
}

/// The fast path for a tokenizer.json, or the setting that keeps it off the fast path (for
/// the engine's description, e.g. "normalizer NFC"). `added` are the added tokens as
/// `tokenizers` parsed them.
pub(crate) fn build(json: &Json, added: &[Added]) -> Result<ByteLevelBpe, String> {
    let use_nfc = if no_normalizer(&json["normalizer"]) {
        false
    } else if json["normalizer"]["type"] == "NFC" {
        true
    } else {
        return Err(format!("normalizer {}", describe(&json["normalizer"])));
    };
    let split = splitter(&json["pre_tokenizer"])?;
    let model = &json["model"];
    if model["type"] != "BPE" {
        return Err(format!("model {}", model["type"].as_str().unwrap_or("?")));
    }
    let empty = |v: &Json| v.is_null() || v.as_str() == Some("") || v.as_f64() == Some(0.0) || v == &Json::Bool(false);
    for key in ["dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"] {
        if !empty(&model[key]) {
            return Err(format!("BPE model sets {key}"));
        }
    }
    let vocab: HashMap<&str, u32> = model["vocab"]
        .as_object()
        .ok_or("BPE model without a vocab")?
        .iter()
        .map(|(k, v)| v.as_u64().map(|id| (k.as_str(), id as u32)).ok_or("a vocab id is not a number"))
        .collect::<Result<_, _>>()?;
    let chars = byte_chars();
    let mut byte_ids = [0u32; 256];
    for (b, c) in chars.iter().enumerate() {
        byte_ids[b] = *vocab.get(c.to_string().as_str()).ok_or("a byte symbol is missing from the vocabulary")?;
    }
    let mut merges = Vec::new();
    for m in model["merges"].as_array().ok_or("BPE model without merges")?.iter() {
        let (a, b) = match m {
            Json::String(s) => s.split_once(' ').ok_or("a merge is not two symbols")?,
            Json::Array(p) if p.len() == 2 => (p[0].as_str().ok_or("bad merge")?, p[1].as_str().ok_or("bad merge")?),
            _ => return Err("a merge is neither \"a b\" nor [a, b]".into()),
        };
        let (ia, ib) =
            (vocab.get(a).ok_or("a merge symbol is not in the vocabulary")?, vocab.get(b).ok_or("bad merge")?);
        let merged = vocab.get(format!("{a}{b}").as_str()).ok_or("a merge result is not in the vocabulary")?;
        merges.push((*ia, *ib, *merged));
    }
    let merges = MergeTable::new(&merges)?;
    let decode = |token: &str| -> Option<Vec<u8>> {
        token.chars().map(|c| chars.iter().position(|&x| x == c).map(|b| b as u8)).collect()
    };
    let vocab_bytes = if model["ignore_merges"] == Json::Bool(true) {
        Some(VocabTable::new(vocab.iter().filter_map(|(t, id)| decode(t).map(|b| (b, *id)))))
    } else {
        None
    };
    for t in json["added_tokens"].as_array().map(Vec::as_slice).unwrap_or_default() {
        for flag in ["single_word", "lstrip", "rstrip"] {
            if t[flag] == Json::Bool(true) {
                return Err(format!("added token {} sets {flag}", t["content"]));
            }
        }
    }
    // Normalized added tokens match their normalized form, as `tokenizers` caches it.
    let normalized_added: Vec<Added> = added
        .iter()
        .map(|a| Added {
            content: if use_nfc && a.normalized { nfc(&a.content).into_owned() } else { a.content.clone() },
            ..*a
        })
        .collect();
    static NEXT_ID: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    Ok(ByteLevelBpe {
        split,
        byte_ids,
        merges,
        vocab_bytes,
        added: AddedTokens::new(&normalized_added)?,
        nfc: use_nfc,
        id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    })
}

impl ByteLevelBpe {
    /// Appends the ids of `text` to `out`; special tokens written in the text are control
    /// tokens only when `special` is set.
    pub fn encode(&self, text: &str, special: bool, out: &mut Vec<u32>) {
        self.encode_until(text, special, usize::MAX, out);
    }

    /// Appends ids of `text` to `out` until `out` holds at least `min` ids or the text ends;
    /// returns whether the whole text was encoded. Byte-level BPE encodes pre-tokenized pieces
    /// independently, so a prefix of the ids never depends on the text after it.
    pub fn encode_until(&self, text: &str, special: bool, min: usize, out: &mut Vec<u32>) -> bool {
        if self.added.is_empty() {
            let text = if self.nfc { nfc(text) } else { Cow::Borrowed(text) };
            return self.encode_text(&text, min, out);
        }
        let done: Result<bool, std::convert::Infallible> = self.added.segments(text, special, self.nfc, &mut |seg| {
            if out.len() >= min {
                return Ok(false);
            }
            Ok(match seg {
                Segment::Text(t) => self.encode_text(t, min, out),
                Segment::Token(id) => {
                    out.push(id);
                    true
                }
            })
        });
        done.unwrap_or_else(|e| match e {})
    }

    /// Encodes `text` (no added tokens in it) until `out` holds `min` ids; whether it ended.
    fn encode_text(&self, text: &str, min: usize, out: &mut Vec<u32>) -> bool {
        piece_cache::with(self.id, |cache| {
            self.split.pieces(text, &mut |piece| {
                if out.len() >= min {
                    return false;
                }
                self.encode_piece(piece.as_bytes(), cache, out);
                true
            })
        })
    }

    /// Whether the pre-tokenizer is GPT-2's `ByteLevel` (else `Split` regexes).
    pub fn is_gpt2(&self) -> bool {
        matches!(self.split, Splitter::Gpt2(_))
    }

    fn encode_piece(&self, piece: &[u8], cache: &mut PieceCache, out: &mut Vec<u32>) {
        let hot = (2..=piece_cache::HOT_PIECE).contains(&piece.len());
        if hot && cache.get_hot(piece, out) {
            return;
        }
        if let Some(v) = &self.vocab_bytes
            && let Some(id) = v.get(piece)
        {
            out.push(id);
            if hot {
                cache.put_hot(piece, id);
            }
            return;
        }
        if piece.len() == 1 {
            out.push(self.byte_ids[piece[0] as usize]);
            return;
        }
        let cached = piece.len() <= piece_cache::MAX_PIECE;
        if cached && cache.get(piece, out) {
            return;
        }
        let start = out.len();
        if piece.len() <= SCAN_LIMIT {
            self.merge_scan(piece, out);
        } else {
            self.merge_queue(piece, out);
        }
        if cached {
            cache.put(piece, &out[start..]);
        }
    }

    fn rank(&self, a: u32, b: u32) -> Option<(u32, u32)> {
        self.merges.get(a, b)
    }

    /// Short pieces: repeatedly merge the leftmost lowest-rank pair. The pairs' ranks are kept
    /// beside the symbols, so a merge looks up only the two pairs it changed; all on the stack.
    fn merge_scan(&self, piece: &[u8], out: &mut Vec<u32>) {
        const NONE: (u32, u32) = (u32::MAX, 0);
        debug_assert!(piece.len() <= SCAN_LIMIT, "longer pieces go through merge_queue");
        let mut n = piece.len();
        if n < 2 {
            out.extend(piece.iter().map(|&b| self.byte_ids[b as usize]));
            return;
        }
        let mut syms = [0u32; SCAN_LIMIT];
        let mut ranks = [NONE; SCAN_LIMIT];
        for (s, &b) in syms.iter_mut().zip(piece) {
            *s = self.byte_ids[b as usize];
        }
        for i in 0..n - 1 {
            ranks[i] = self.rank(syms[i], syms[i + 1]).unwrap_or(NONE);
        }
        while n > 1 {
            let mut best = 0;
            for i in 1..n - 1 {
                if ranks[i].0 < ranks[best].0 {
                    best = i;
                }
            }
            if ranks[best].0 == u32::MAX {
                break;
            }
            syms[best] = ranks[best].1;
            syms.copy_within(best + 2..n, best + 1);
            ranks.copy_within(best + 1..n - 1, best);
            n -= 1;
            if best > 0 {
                ranks[best - 1] = self.rank(syms[best - 1], syms[best]).unwrap_or(NONE);
            }
            if best + 1 < n {
                ranks[best] = self.rank(syms[best], syms[best + 1]).unwrap_or(NONE);
            }
        }
        out.extend_from_slice(&syms[..n]);
    }

    /// Long pieces: the same merges through a priority queue over a linked list, O(n log n).
    fn merge_queue(&self, piece: &[u8], out: &mut Vec<u32>) {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let n = piece.len();
        let mut id: Vec<u32> = piece.iter().map(|&b| self.byte_ids[b as usize]).collect();
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut alive = vec![true; n];
        let mut heap = BinaryHeap::new();
        for i in 0..n - 1 {
            if let Some((rank, merged)) = self.rank(id[i], id[i + 1]) {
                heap.push(Reverse((rank, i, merged)));
            }
        }
        while let Some(Reverse((_, i, merged))) = heap.pop() {
            let j = next[i];
            // Stale: the left symbol is gone, or the pair no longer makes this merge.
            if !alive[i] || j >= n || self.rank(id[i], id[j]).map(|m| m.1) != Some(merged) {
                continue;
            }
            id[i] = merged;
            alive[j] = false;
            next[i] = next[j];
            if next[j] < n {
                prev[next[j]] = i;
            }
            if prev[i] < n {
                let p = prev[i];
                if let Some((rank, m)) = self.rank(id[p], id[i]) {
                    heap.push(Reverse((rank, p, m)));
                }
            }
            if next[i] < n {
                let k = next[i];
                if let Some((rank, m)) = self.rank(id[i], id[k]) {
                    heap.push(Reverse((rank, i, m)));
                }
            }
        }
        let mut i = 0;
        while i < n {
            out.push(id[i]);
            i = next[i];
        }
    }
}

/// Text that exercises every rule: contractions, spaces before words and numbers, runs of
/// spaces and newlines, punctuation, non-Latin scripts, emoji, the added tokens, long pieces.
pub(crate) fn self_check_texts(added: &[String]) -> Vec<String> {
    let mut v: Vec<String> = [
        "Hello world, this is a test.",
        "It's what they'll do; I'd say they've 'm' 're 'll 's 't; IT'S THEY'LL 'S 'Re",
        "  leading spaces,\ttabs\t\tand\n\nnewlines \n \r\n   trailing   ",
        "numbers 12345 67 8.90 1,000,000 and 3rd 21st",
        "Ünïcödé — naïve café; 日本語のテキスト; Привет мир; مرحبا; 🙂🎉 emoji",
        "punctuation!!! ??? ... --- ((( ))) [[x]] {y} <z> @#$%^&*",
        "code: fn main() { println!(\"{}\", x + 1); } // comment",
        "nbsp\u{a0}\u{a0}x \u{3000}y\u{2028}z e\u{301}\u{301} 👩\u{200d}💻 ٣٤ Ⅻ ½ \r\n\r\n\tq",
        "digits 1 12 123 1234 12345678901 ９９９ and CJK 一二三四 ひらがな カタカナ 한국어; CamelCase HTTPServer x/y\n/z",
        "CRLF\r\n\r\n  \r\n\tmixed \n\n\n  end\r\n",
        "ǅemal ʰmod ÀÉÎ àéî I'M WE'VE You'Re \"quoted\" (paren) [b] {c} #tag @at $5 50% a_b a-b a.b",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    v.push(format!("{}{}{}", "a".repeat(300), " ".repeat(200), "Supercalifragilisticexpialidocious".repeat(9)));
    for t in added {
        v.push(format!("before{t}after {t} {t}{t}"));
    }
    v
}
