//! The `tokenizers` crate's encoding, without its silent failures.
//!
//! `tokenizers` (with `fancy-regex`) runs regexes in three places: `ByteLevel`'s GPT-2
//! pattern, `Split` with a regex, and the `Replace` normalizer with a regex. On a regex error
//! (the backtracking stack overflows on a long whitespace run) it stops splitting without an
//! error, and the rest of the text becomes one piece: wrong ids. Its encoder is assembled
//! here from its own public parts (added vocabulary, normalizers, pre-tokenizers, model,
//! post-processor), in the same order as `TokenizerImpl::encode_fast`, except that each of
//! those regexes runs through [`Checked`]: the same `fancy-regex` pattern, and when it fails,
//! the same matches computed without backtracking (the hand-written GPT-2 pre-tokenizer, or
//! [`RegexSplit`] for the `...|\s+(?!\S)|\s+` family of Llama-3, GPT-4o, Qwen, DeepSeek),
//! else an error. Output ids are those of `tokenizers` whenever its regexes succeed.

use std::sync::OnceLock;

use serde_json::Value as Json;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::tokenizer::pattern::{Invert, Pattern};
use tokenizers::{
    NormalizedString, Normalizer, NormalizerWrapper, OffsetType, Offsets, PreTokenizedString, PreTokenizer,
    PreTokenizerWrapper, SplitDelimiterBehavior,
};

use crate::pretok::{GPT2_PATTERN, Gpt2};
use crate::split::RegexSplit;

type TkResult<T> = tokenizers::Result<T>;

/// The same matches as a failed regex, computed without backtracking.
enum Fallback {
    Gpt2(Gpt2),
    Family(RegexSplit),
}

/// A regex as `tokenizers` runs it, whose failure is an error or the same matches computed
/// another way.
struct Checked {
    pattern: String,
    regex: fancy_regex::Regex,
    fallback: Option<Fallback>,
}

impl Checked {
    fn new(pattern: &str) -> Result<Checked, String> {
        let regex = fancy_regex::Regex::new(pattern).map_err(|e| format!("regex {pattern:?}: {e}"))?;
        let fallback = match Gpt2::new() {
            Some(gpt2) if pattern == GPT2_PATTERN => Some(Fallback::Gpt2(gpt2)),
            _ => RegexSplit::new(pattern).map(Fallback::Family),
        };
        Ok(Checked { pattern: pattern.to_string(), regex, fallback })
    }
}

/// Matches as `Pattern::find_matches` gives them: the matches and the gaps between them.
fn with_gaps(len: usize, matches: impl Iterator<Item = (usize, usize)>) -> Vec<(Offsets, bool)> {
    let mut prev = 0;
    let mut splits = Vec::new();
    for (start, end) in matches {
        if prev != start {
            splits.push(((prev, start), false));
        }
        splits.push(((start, end), true));
        prev = end;
    }
    if prev != len {
        splits.push(((prev, len), false));
    }
    splits
}

impl Pattern for &Checked {
    fn find_matches(&self, inside: &str) -> TkResult<Vec<(Offsets, bool)>> {
        if inside.is_empty() {
            return Ok(vec![((0, 0), false)]);
        }
        let mut matches = Vec::new();
        for m in self.regex.find_iter(inside) {
            match m {
                Ok(m) => matches.push((m.start(), m.end())),
                Err(e) => {
                    return match &self.fallback {
                        Some(Fallback::Gpt2(gpt2)) => Ok(with_gaps(inside.len(), gpt2.pieces(inside))),
                        Some(Fallback::Family(split)) => Ok(with_gaps(inside.len(), split.find_iter(inside))),
                        None => Err(format!(
                            "the regex {:?} failed on a piece of {} bytes ({e}); the tokenizers crate \
                             would silently stop splitting there and give wrong ids",
                            self.pattern,
                            inside.len()
                        )
                        .into()),
                    };
                }
            }
        }
        Ok(with_gaps(inside.len(), matches.into_iter()))
    }
}

/// One pre-tokenization step.
enum PreStep {
    /// `ByteLevel` with its regex: split by GPT-2's pattern, then map bytes to symbols.
    ByteLevel { add_prefix_space: bool, split: Checked, bytes: ByteLevel },
    /// `Split` with a regex.
    Split { regex: Checked, behavior: SplitDelimiterBehavior, invert: bool },
    /// Any other pre-tokenizer, run by `tokenizers` as is (no regex of its own).
    Other(PreTokenizerWrapper),
}

/// One normalization step.
enum NormStep {
    /// `Replace` with a regex.
    Replace { regex: Checked, content: String },
    /// Any other normalizer, run by `tokenizers`.
    Other(NormalizerWrapper),
}

/// The encoder: the pre-tokenizer and normalizer of a `tokenizer.json` as checked steps.
pub(crate) struct CheckedEncoder {
    normalizer: Option<Vec<NormStep>>,
    pre: Vec<PreStep>,
}

fn parse<T: serde::de::DeserializeOwned>(node: &Json, what: &str) -> Result<T, String> {
    serde_json::from_value(node.clone()).map_err(|e| format!("{what}: {e}"))
}

fn flatten_pre(node: &Json, out: &mut Vec<PreStep>) -> Result<(), String> {
    match node["type"].as_str() {
        Some("Sequence") => {
            for n in node["pretokenizers"].as_array().ok_or("a pre-tokenizer Sequence has no list")? {
                flatten_pre(n, out)?;
            }
        }
        // `use_regex` defaults to true in `tokenizers`.
        Some("ByteLevel") if node["use_regex"] != Json::Bool(false) => {
            let add_prefix_space = node["add_prefix_space"].as_bool().unwrap_or(true);
            let trim = node["trim_offsets"].as_bool().unwrap_or(true);
            out.push(PreStep::ByteLevel {
                add_prefix_space,
                split: Checked::new(GPT2_PATTERN)?,
                bytes: ByteLevel::new(false, trim, false),
            });
        }
        Some("Split") if node["pattern"]["Regex"].is_string() => {
            out.push(PreStep::Split {
                regex: Checked::new(node["pattern"]["Regex"].as_str().unwrap_or_default())?,
                behavior: parse(&node["behavior"], "Split behavior")?,
                invert: node["invert"].as_bool().unwrap_or(false),
            });
        }
        _ => out.push(PreStep::Other(parse(node, "pre-tokenizer")?)),
    }
    Ok(())
}

fn flatten_norm(node: &Json, out: &mut Vec<NormStep>) -> Result<(), String> {
    match node["type"].as_str() {
        Some("Sequence") => {
            for n in node["normalizers"].as_array().ok_or("a normalizer Sequence has no list")? {
                flatten_norm(n, out)?;
            }
        }
        Some("Replace") if node["pattern"]["Regex"].is_string() => out.push(NormStep::Replace {
            regex: Checked::new(node["pattern"]["Regex"].as_str().unwrap_or_default())?,
            content: node["content"].as_str().unwrap_or_default().to_string(),
        }),
        _ => out.push(NormStep::Other(parse(node, "normalizer")?)),
    }
    Ok(())
}

/// Normalization for one call: errors are kept here because `tokenizers` drops the
/// normalizer's result while splitting out added tokens.
struct Normalize<'a> {
    steps: &'a [NormStep],
    error: OnceLock<String>,
}

impl Normalizer for Normalize<'_> {
    fn normalize(&self, normalized: &mut NormalizedString) -> TkResult<()> {
        for step in self.steps {
            let done = match step {
                NormStep::Replace { regex, content } => normalized.replace(regex, content),
                NormStep::Other(n) => n.normalize(normalized),
            };
            if let Err(e) = done {
                let _ = self.error.set(e.to_string());
                return Err(e);
            }
        }
        Ok(())
    }
}

impl CheckedEncoder {
    /// The steps of a `tokenizer.json`.
    pub(crate) fn new(json: &Json) -> Result<CheckedEncoder, String> {
        let normalizer = match &json["normalizer"] {
            Json::Null => None,
            node => {
                let mut steps = Vec::new();
                flatten_norm(node, &mut steps)?;
                Some(steps)
            }
        };
        let mut pre = Vec::new();
        if !json["pre_tokenizer"].is_null() {
            flatten_pre(&json["pre_tokenizer"], &mut pre)?;
        }
        Ok(CheckedEncoder { normalizer, pre })
    }

    /// Token ids of `text`, no special tokens added, as `tokenizer.encode_fast(text, false)`.
    pub(crate) fn encode(&self, tokenizer: &tokenizers::Tokenizer, text: &str) -> Result<Vec<u32>, String> {
        let call = self.normalizer.as_ref().map(|steps| Normalize { steps, error: OnceLock::new() });
        let mut pre = tokenizer.get_added_vocabulary().extract_and_normalize(call.as_ref(), text);
        if let Some(e) = call.as_ref().and_then(|c| c.error.get()) {
            return Err(format!("normalization: {e}"));
        }
        self.pre_tokenize(&mut pre).map_err(|e| format!("pre-tokenization: {e}"))?;
        let model = tokenizer.get_model();
        pre.tokenize(|n| tokenizers::Model::tokenize(model, n.get())).map_err(|e| e.to_string())?;
        let encoding = pre.into_encoding(None, 0, OffsetType::None).map_err(|e| e.to_string())?;
        let encoding = tokenizer.post_process(encoding, None, false).map_err(|e| e.to_string())?;
        Ok(encoding.get_ids().to_vec())
    }

    fn pre_tokenize(&self, pre: &mut PreTokenizedString) -> TkResult<()> {
        for step in &self.pre {
            match step {
                PreStep::ByteLevel { add_prefix_space, split, bytes } => {
                    pre.split(|_, mut normalized| {
                        if *add_prefix_space && !normalized.get().starts_with(' ') {
                            normalized.prepend(" ");
                        }
                        normalized.split(split, SplitDelimiterBehavior::Isolated)
                    })?;
                    bytes.pre_tokenize(pre)?;
                }
                PreStep::Split { regex, behavior, invert } => {
                    if *invert {
                        pre.split(|_, normalized| normalized.split(Invert(regex), *behavior))?;
                    } else {
                        pre.split(|_, normalized| normalized.split(regex, *behavior))?;
                    }
                }
                PreStep::Other(p) => p.pre_tokenize(pre)?,
            }
        }
        Ok(())
    }
}
