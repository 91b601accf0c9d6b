//! An exact fast path for byte-level BPE tokenizers (GPT-2 and its kin).
//!
//! The `tokenizers` crate builds an `Encoding` per call: a `String` per token, offsets,
//! masks. For the data loader only the ids matter, and the tokenizer is the pipeline's whole
//! CPU cost. This module re-implements exactly what `tokenizers` does for one family of
//! `tokenizer.json` files, producing ids only:
//!
//! 1. added tokens (e.g. `<|endoftext|>`) are split out of the text first, leftmost-longest;
//! 2. the rest is cut by the GPT-2 regex into pieces (matches and the gaps between them);
//! 3. each piece's bytes start as byte symbols, and the adjacent pair with the lowest merge
//!    rank (leftmost on ties) is merged until no listed merge applies.
//!
//! It is used only when the file is of that family (no normalizer, a `ByteLevel`
//! pre-tokenizer without prefix space, a `BPE` model without dropout, prefixes, suffixes or
//! byte fallback, every byte symbol in the vocabulary, plain added tokens), and only after a
//! self-check against `tokenizers` on text that exercises every rule. Otherwise the
//! `tokenizers` crate does the work. Tests compare the two on real documents and random text.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use serde_json::Value as Json;

/// The GPT-2 pre-tokenization regex, as `tokenizers`' `ByteLevel` uses it.
const GPT2_PATTERN: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Pieces longer than this are merged with a priority queue instead of repeated scans.
const SCAN_LIMIT: usize = 64;

/// Pieces up to this length are cached per thread (most words recur).
const CACHE_PIECE: usize = 32;
const CACHE_ENTRIES: usize = 1 << 16;

/// A multiplicative hasher for integer keys and short byte strings.
#[derive(Default)]
struct Mix(u64);

impl Hasher for Mix {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

type Fast<K, V> = HashMap<K, V, BuildHasherDefault<Mix>>;

/// The ids of a byte-level BPE tokenizer, computed without `tokenizers`' per-token objects.
pub(crate) struct ByteLevelBpe {
    regex: fancy_regex::Regex,
    /// Id of each single byte.
    byte_ids: [u32; 256],
    /// (left id, right id) → (rank, merged id).
    merges: Fast<u64, (u32, u32)>,
    /// Whole pieces looked up before merging (`ignore_merges`).
    vocab_bytes: Option<Fast<Vec<u8>, u32>>,
    /// Added tokens, longest first.
    added: Vec<(String, u32)>,
    /// Identifies this table in the per-thread cache.
    id: usize,
}

/// A cached piece: up to 32 bytes packed into words, so lookups compare four integers
/// instead of calling `memcmp` on a heap string.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
struct PieceKey([u64; 4], u8);

impl PieceKey {
    fn new(piece: &[u8]) -> Self {
        let mut words = [0u64; 4];
        for (i, chunk) in piece.chunks(8).enumerate() {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            words[i] = u64::from_le_bytes(b);
        }
        PieceKey(words, piece.len() as u8)
    }
}

/// A thread's cache: the table it belongs to, and pieces → ids.
type PieceCache = (usize, Fast<PieceKey, Box<[u32]>>);

thread_local! {
    static CACHE: RefCell<PieceCache> = RefCell::new((usize::MAX, Fast::default()));
}

/// The GPT-2 byte ↔ unicode table: printable bytes map to themselves, the rest to U+0100....
fn byte_chars() -> [char; 256] {
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

/// Why a tokenizer.json is not of the supported family (None when it is).
pub(crate) fn build(json: &Json) -> Result<ByteLevelBpe, String> {
    if !json["normalizer"].is_null() {
        return Err("it has a normalizer".into());
    }
    let pre = &json["pre_tokenizer"];
    if pre["type"] != "ByteLevel"
        || pre["add_prefix_space"] != Json::Bool(false)
        || pre["use_regex"] == Json::Bool(false)
    {
        return Err("its pre-tokenizer is not ByteLevel without prefix space".into());
    }
    let model = &json["model"];
    if model["type"] != "BPE" {
        return Err("its model is not BPE".into());
    }
    let empty = |v: &Json| v.is_null() || v.as_str() == Some("") || v.as_f64() == Some(0.0) || v == &Json::Bool(false);
    for key in ["dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"] {
        if !empty(&model[key]) {
            return Err(format!("its BPE model sets {key}"));
        }
    }
    let vocab: HashMap<&str, u32> = model["vocab"]
        .as_object()
        .ok_or("no vocab")?
        .iter()
        .map(|(k, v)| v.as_u64().map(|id| (k.as_str(), id as u32)).ok_or("a vocab id is not a number"))
        .collect::<Result<_, _>>()?;
    let chars = byte_chars();
    let mut byte_ids = [0u32; 256];
    for (b, c) in chars.iter().enumerate() {
        byte_ids[b] = *vocab.get(c.to_string().as_str()).ok_or("a byte symbol is missing from the vocabulary")?;
    }
    let mut merges: Fast<u64, (u32, u32)> = Fast::default();
    for (rank, m) in model["merges"].as_array().ok_or("no merges")?.iter().enumerate() {
        let (a, b) = match m {
            Json::String(s) => s.split_once(' ').ok_or("a merge is not two symbols")?,
            Json::Array(p) if p.len() == 2 => (p[0].as_str().ok_or("bad merge")?, p[1].as_str().ok_or("bad merge")?),
            _ => return Err("a merge is neither \"a b\" nor [a, b]".into()),
        };
        let (ia, ib) =
            (vocab.get(a).ok_or("a merge symbol is not in the vocabulary")?, vocab.get(b).ok_or("bad merge")?);
        let merged = vocab.get(format!("{a}{b}").as_str()).ok_or("a merge result is not in the vocabulary")?;
        let key = (*ia as u64) << 32 | *ib as u64;
        if merges.insert(key, (rank as u32, *merged)).is_some() {
            return Err("a merge is listed twice".into());
        }
    }
    let decode = |token: &str| -> Option<Vec<u8>> {
        token.chars().map(|c| chars.iter().position(|&x| x == c).map(|b| b as u8)).collect()
    };
    let vocab_bytes = if model["ignore_merges"] == Json::Bool(true) {
        Some(vocab.iter().filter_map(|(t, id)| decode(t).map(|b| (b, *id))).collect())
    } else {
        None
    };
    let mut added = Vec::new();
    for t in json["added_tokens"].as_array().map(Vec::as_slice).unwrap_or_default() {
        for flag in ["single_word", "lstrip", "rstrip"] {
            if t[flag] == Json::Bool(true) {
                return Err(format!("an added token sets {flag}"));
            }
        }
        let content = t["content"].as_str().filter(|c| !c.is_empty()).ok_or("an added token has no content")?;
        added.push((content.to_string(), t["id"].as_u64().ok_or("an added token has no id")? as u32));
    }
    added.sort_by_key(|a| std::cmp::Reverse(a.0.len()));
    let regex = fancy_regex::Regex::new(GPT2_PATTERN).map_err(|e| e.to_string())?;
    static NEXT_ID: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    Ok(ByteLevelBpe {
        regex,
        byte_ids,
        merges,
        vocab_bytes,
        added,
        id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    })
}

impl ByteLevelBpe {
    /// Appends the ids of `text` to `out`.
    pub fn encode(&self, text: &str, out: &mut Vec<u32>) -> Result<(), String> {
        self.encode_until(text, usize::MAX, out).map(|_| ())
    }

    /// Appends ids of `text` to `out` until `out` holds at least `min` ids or the text ends;
    /// returns whether the whole text was encoded. Byte-level BPE encodes pre-tokenized pieces
    /// independently, so a prefix of the ids never depends on the text after it.
    pub fn encode_until(&self, text: &str, min: usize, out: &mut Vec<u32>) -> Result<bool, String> {
        let mut rest = text;
        while !rest.is_empty() {
            // The leftmost added token, the longest at that position.
            let next = self
                .added
                .iter()
                .filter_map(|(t, id)| rest.find(t.as_str()).map(|at| (at, t.len(), *id)))
                .min_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
            let (before, token) = match next {
                Some((at, len, id)) => (&rest[..at], Some((len, id, at))),
                None => (rest, None),
            };
            if !self.encode_text(before, min, out)? {
                return Ok(false);
            }
            match token {
                Some((len, id, at)) => {
                    out.push(id);
                    rest = &rest[at + len..];
                    if out.len() >= min && !rest.is_empty() {
                        return Ok(false);
                    }
                }
                None => break,
            }
        }
        Ok(true)
    }

    /// Encodes `text` (no added tokens in it) until `out` holds `min` ids; whether it ended.
    fn encode_text(&self, text: &str, min: usize, out: &mut Vec<u32>) -> Result<bool, String> {
        let mut at = 0;
        for m in self.regex.find_iter(text) {
            let m = m.map_err(|e| format!("pre-tokenization: {e}"))?;
            if m.start() > at {
                self.encode_piece(&text.as_bytes()[at..m.start()], out);
            }
            self.encode_piece(m.as_str().as_bytes(), out);
            at = m.end();
            if out.len() >= min && at < text.len() {
                return Ok(false);
            }
        }
        if at < text.len() {
            self.encode_piece(&text.as_bytes()[at..], out);
        }
        Ok(true)
    }

    fn encode_piece(&self, piece: &[u8], out: &mut Vec<u32>) {
        if let Some(v) = &self.vocab_bytes
            && let Some(id) = v.get(piece)
        {
            out.push(*id);
            return;
        }
        if piece.len() == 1 {
            out.push(self.byte_ids[piece[0] as usize]);
            return;
        }
        let key = (piece.len() <= CACHE_PIECE).then(|| PieceKey::new(piece));
        if let Some(key) = key {
            let hit = CACHE.with(|c| {
                let c = c.borrow();
                if c.0 == self.id { c.1.get(&key).map(|ids| out.extend_from_slice(ids)).is_some() } else { false }
            });
            if hit {
                return;
            }
        }
        let start = out.len();
        if piece.len() <= SCAN_LIMIT {
            self.merge_scan(piece, out);
        } else {
            self.merge_queue(piece, out);
        }
        if let Some(key) = key {
            CACHE.with(|c| {
                let mut c = c.borrow_mut();
                if c.0 != self.id {
                    *c = (self.id, Fast::default());
                }
                if c.1.len() < CACHE_ENTRIES {
                    c.1.insert(key, out[start..].into());
                }
            });
        }
    }

    fn rank(&self, a: u32, b: u32) -> Option<(u32, u32)> {
        self.merges.get(&((a as u64) << 32 | b as u64)).copied()
    }

    /// Short pieces: repeatedly merge the leftmost lowest-rank pair.
    fn merge_scan(&self, piece: &[u8], out: &mut Vec<u32>) {
        let mut syms: Vec<u32> = piece.iter().map(|&b| self.byte_ids[b as usize]).collect();
        loop {
            let mut best: Option<(u32, usize, u32)> = None;
            for i in 0..syms.len().saturating_sub(1) {
                if let Some((rank, merged)) = self.rank(syms[i], syms[i + 1])
                    && best.is_none_or(|(r, _, _)| rank < r)
                {
                    best = Some((rank, i, merged));
                }
            }
            let Some((_, i, merged)) = best else { break };
            syms[i] = merged;
            syms.remove(i + 1);
        }
        out.extend_from_slice(&syms);
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
        "It's what they'll do; I'd say they've 'm' 're 'll 's 't",
        "  leading spaces,\ttabs\t\tand\n\nnewlines \n \r\n   trailing   ",
        "numbers 12345 67 8.90 1,000,000 and 3rd 21st",
        "Ünïcödé — naïve café; 日本語のテキスト; Привет мир; مرحبا; 🙂🎉 emoji",
        "punctuation!!! ??? ... --- ((( ))) [[x]] {y} <z> @#$%^&*",
        "code: fn main() { println!(\"{}\", x + 1); } // comment",
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
