//! A loaded tokenizer with its identity.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use tokenizers::PaddingStrategy;

use crate::added::Added;
use crate::bpe::ByteLevelBpe;
use crate::checked_encoder::CheckedEncoder;

/// The engine's description when the fast path encodes with GPT-2's pre-tokenizer.
const FAST_ENGINE: &str = "byte-level BPE, exact fast path";
/// ... and with `Split` regexes (Llama-3, GPT-4o, DeepSeek-V3).
const FAST_SPLIT_ENGINE: &str = "byte-level BPE with Split regexes, exact fast path";

/// Why a tokenizer could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("tokenizer {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The read error.
        source: std::io::Error,
    },
    /// The file is not a tokenizer.json the `tokenizers` crate understands.
    #[error("tokenizer {path}: not a valid tokenizer.json: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A setting of the file that a deterministic loader cannot honour.
    #[error("tokenizer {path}: {setting} is not supported: {why}")]
    Unsupported {
        /// The file.
        path: String,
        /// The setting and its value, as the file names it.
        setting: String,
        /// Why it is refused.
        why: String,
    },
    /// A special token the settings name is not in the vocabulary.
    #[error("tokenizer {path}: no token {token:?} in the vocabulary")]
    UnknownToken {
        /// The file.
        path: String,
        /// The token.
        token: String,
    },
    /// Invalid tokenize settings.
    #[error("tokenize: {0}")]
    Config(String),
    /// A text the tokenizer cannot encode (a pattern that fails on it).
    #[error("cannot encode: {0}")]
    Encode(String),
    /// A chat template that does not compile or a `tokenizer_config.json` without one.
    #[error("chat template {origin}: {message}")]
    Template {
        /// The file (or the name given to a template's text).
        origin: String,
        /// What is wrong.
        message: String,
    },
}

/// A Hugging Face tokenizer, shared between threads, identified by the SHA-256 of its
/// `tokenizer.json`.
///
/// Byte-level BPE files (GPT-2 and its kin) are encoded by an exact fast path that produces
/// ids without `tokenizers`' per-token objects (see [`Tokenizer::engine`]); every other file
/// by the `tokenizers` crate.
///
/// Loading makes the file deterministic and length-neutral: `truncation` and `padding` are
/// cleared (the pipeline decides lengths; see [`Tokenizer::load_notes`]) and BPE dropout is
/// refused. Special tokens written inside document text are read as text unless
/// [`Tokenizer::allow_special_tokens_in_text`] says otherwise.
#[derive(Clone)]
pub struct Tokenizer {
    /// The `tokenizers` tokenizer, without truncation or padding, with
    /// `encode_special_tokens` set to the opposite of `special_in_text`.
    inner: Arc<tokenizers::Tokenizer>,
    reference: Arc<CheckedEncoder>,
    fast: Option<Arc<ByteLevelBpe>>,
    engine: String,
    notes: Arc<[String]>,
    special_in_text: bool,
    sha256: String,
    source: String,
    /// Each id's bytes, for a byte-level vocabulary (built on first use; `None` otherwise):
    /// token offsets without the `tokenizers` crate's per-token objects.
    token_bytes: Arc<std::sync::OnceLock<Option<TokenBytes>>>,
}

/// Each id's bytes, indexed by id.
type TokenBytes = Vec<Box<[u8]>>;

/// How the fast path compared with the `tokenizers` crate on some texts
/// ([`Tokenizer::check_against_reference`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// The engine that was checked ([`Tokenizer::engine`]).
    pub engine: String,
    /// Texts compared.
    pub docs: usize,
    /// Tokens compared (the `tokenizers` crate's count).
    pub tokens: usize,
    /// Texts whose ids differ, each with its first difference.
    pub mismatches: Vec<Mismatch>,
    /// Texts that one of the two could not encode: (index, message).
    pub errors: Vec<(usize, String)>,
}

/// The first difference between the two engines on one text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Index of the text, counting from 0.
    pub doc: usize,
    /// The first token position where the ids differ.
    pub position: usize,
    /// The fast path's id there (`None`: its ids ended before).
    pub ours: Option<u32>,
    /// The `tokenizers` crate's id there (`None`: its ids ended before).
    pub theirs: Option<u32>,
}

impl CheckReport {
    /// Whether every text gave the same ids on both engines.
    pub fn is_ok(&self) -> bool {
        self.mismatches.is_empty() && self.errors.is_empty()
    }
}

impl std::fmt::Display for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} texts, {} tokens compared with the tokenizers crate", self.engine, self.docs, self.tokens)?;
        if self.is_ok() {
            return write!(f, ", all equal");
        }
        write!(f, ", {} differ, {} failed", self.mismatches.len(), self.errors.len())?;
        if let Some(m) = self.mismatches.first() {
            let id = |x: Option<u32>| x.map_or("(end)".to_string(), |i| i.to_string());
            write!(f, "; first: text {} at token {}: {} here, {} there", m.doc, m.position, id(m.ours), id(m.theirs))?;
        }
        if let Some((doc, e)) = self.errors.first() {
            write!(f, "; first failure: text {doc}: {e}")?;
        }
        Ok(())
    }
}

impl Tokenizer {
    /// Loads a `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| Error::Read { path: shown.clone(), source })?;
        Tokenizer::from_bytes(&bytes, &shown)
    }

    /// Parses the contents of a `tokenizer.json`; `source` names it in errors.
    pub fn from_bytes(bytes: &[u8], source: &str) -> Result<Self, Error> {
        let parse_error = |message: String| Error::Parse { path: source.to_string(), message };
        let json: Json = serde_json::from_slice(bytes).map_err(|e| parse_error(e.to_string()))?;
        // Refused before `tokenizers` builds anything from it.
        refuse_dropout(&json, source)?;
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| parse_error(e.to_string()))?;
        Tokenizer::assemble(inner, &json, bytes, source)
    }

    /// Wraps a tokenizer built in code (its identity is the hash of its serialized form).
    pub fn from_tokenizer(inner: tokenizers::Tokenizer, source: &str) -> Result<Self, Error> {
        let text =
            inner.to_string(false).map_err(|e| Error::Parse { path: source.to_string(), message: e.to_string() })?;
        let json: Json = serde_json::from_str(&text)
            .map_err(|e| Error::Parse { path: source.to_string(), message: e.to_string() })?;
        refuse_dropout(&json, source)?;
        Tokenizer::assemble(inner, &json, text.as_bytes(), source)
    }

    /// Clears the length settings and picks the engine: the fast path when the file is of its
    /// family and it agrees with `tokenizers` on the self-check texts (both ways of reading
    /// special tokens), else `tokenizers`.
    fn assemble(mut inner: tokenizers::Tokenizer, json: &Json, bytes: &[u8], source: &str) -> Result<Self, Error> {
        let mut notes = Vec::new();
        if let Some(t) = inner.get_truncation() {
            notes.push(format!(
                "truncation (max_length {}, stride {}, {:?}, {:?}) in tokenizer.json cleared: the loader decides lengths",
                t.max_length, t.stride, t.strategy, t.direction
            ));
        }
        if let Some(p) = inner.get_padding() {
            let to = match p.strategy {
                PaddingStrategy::Fixed(n) => format!("to {n} tokens"),
                PaddingStrategy::BatchLongest => "to the longest in a batch".to_string(),
            };
            notes.push(format!(
                "padding ({to}, with {:?} = {}) in tokenizer.json cleared: the loader decides lengths",
                p.pad_token, p.pad_id
            ));
        }
        inner.with_truncation(None).map_err(|e| Error::Parse { path: source.to_string(), message: e.to_string() })?;
        inner.with_padding(None);
        let reference =
            CheckedEncoder::new(json).map_err(|message| Error::Parse { path: source.to_string(), message })?;

        let added: Vec<Added> = inner
            .get_added_tokens_decoder()
            .into_iter()
            .map(|(id, t)| Added { content: t.content, id, special: t.special, normalized: t.normalized })
            .collect();
        let (fast, engine) = match crate::bpe::build(json, &added) {
            Ok(bpe) => {
                let texts = crate::bpe::self_check_texts(&added.iter().map(|a| a.content.clone()).collect::<Vec<_>>());
                let mut agrees = true;
                for special in [true, false] {
                    inner.set_encode_special_tokens(!special);
                    agrees &= texts.iter().all(|text| {
                        let mut ids = Vec::new();
                        bpe.encode(text, special, &mut ids);
                        reference.encode(&inner, text).is_ok_and(|r| r == ids)
                    });
                }
                if agrees {
                    let engine = if bpe.is_gpt2() { FAST_ENGINE } else { FAST_SPLIT_ENGINE };
                    (Some(Arc::new(bpe)), engine.to_string())
                } else {
                    (None, "tokenizers crate (the fast path disagreed on its self-check)".to_string())
                }
            }
            Err(why) => (None, format!("tokenizers crate (no fast path: {why})")),
        };
        // Text is text by default.
        inner.set_encode_special_tokens(true);
        Ok(Tokenizer {
            inner: Arc::new(inner),
            reference: Arc::new(reference),
            fast,
            engine,
            notes: notes.into(),
            special_in_text: false,
            sha256: hex::encode(Sha256::digest(bytes)),
            source: source.to_string(),
            token_bytes: Arc::default(),
        })
    }

    /// Whether special tokens (`<|endoftext|>`, `<s>`...) written inside a document's text
    /// become control tokens (`true`) or are encoded as the text they are (`false`, the
    /// default, like tiktoken's `encode_ordinary`). Documents that happen to contain such
    /// strings (a scraped tokenizer config, a forum post about one) then cannot end a
    /// document early or inject chat markers. Non-special added tokens are found in text
    /// either way. BOS/EOS set on the [`crate::Tokenize`] operator are not affected.
    #[must_use]
    pub fn allow_special_tokens_in_text(mut self, allow: bool) -> Self {
        if allow != self.special_in_text {
            Arc::make_mut(&mut self.inner).set_encode_special_tokens(!allow);
            self.special_in_text = allow;
        }
        self
    }

    /// Whether special tokens written in text become control tokens (see
    /// [`Tokenizer::allow_special_tokens_in_text`]).
    pub fn special_tokens_in_text(&self) -> bool {
        self.special_in_text
    }

    /// SHA-256 of the tokenizer's JSON: part of every fingerprint that depends on it.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Everything about this tokenizer that decides its output ids: the file's SHA-256, the
    /// engine chosen (a fast path bug fixed or a fallback taken changes it), how special
    /// tokens in text are read, and the settings cleared at load.
    pub fn fingerprint(&self) -> zephon_operator::Settings {
        zephon_operator::Settings::new("tokenizer", 1)
            .set("sha256", &self.sha256)
            .set("engine", &self.engine)
            .set("special_tokens_in_text", self.special_in_text)
            .set("cleared", vec!["truncation", "padding"])
    }

    /// What loading changed in the file's settings, one line each (e.g. "truncation
    /// (max_length 512, ...) in tokenizer.json cleared: the loader decides lengths"), for
    /// `explain`.
    pub fn load_notes(&self) -> &[String] {
        &self.notes
    }

    /// Where the tokenizer came from (its path), for messages.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The id of `token`, or an error naming it.
    pub fn token_id(&self, token: &str) -> Result<u32, Error> {
        self.inner
            .token_to_id(token)
            .ok_or_else(|| Error::UnknownToken { path: self.source.clone(), token: token.to_string() })
    }

    /// Vocabulary size, with added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Which engine encodes: the exact fast path, or the `tokenizers` crate (and which
    /// setting of the file keeps it off the fast path).
    pub fn engine(&self) -> &str {
        &self.engine
    }

    /// Token ids of `text`, with no special tokens added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, Error> {
        match &self.fast {
            Some(bpe) => {
                let mut ids = Vec::with_capacity(text.len() / 3 + 1);
                bpe.encode(text, self.special_in_text, &mut ids);
                Ok(ids)
            }
            None => self.encode_reference(text),
        }
    }

    /// At least the first `min` token ids of `text` (all of them when it has fewer), and
    /// whether the text was encoded to its end. Only the fast path stops early.
    pub fn encode_prefix(&self, text: &str, min: usize) -> Result<(Vec<u32>, bool), Error> {
        match &self.fast {
            Some(bpe) => {
                let mut ids = Vec::with_capacity(min.min(text.len()) + 1);
                let whole = bpe.encode_until(text, self.special_in_text, min, &mut ids);
                Ok((ids, whole))
            }
            None => self.encode_reference(text).map(|ids| (ids, true)),
        }
    }

    /// Token ids of `text` from the `tokenizers` crate, whatever the engine (the reference
    /// the fast path is checked against). Where `tokenizers`' regexes fail on long runs and
    /// it would silently stop splitting, GPT-2's pattern is split by hand and any other
    /// pattern is an error: never wrong ids.
    pub fn encode_reference(&self, text: &str) -> Result<Vec<u32>, Error> {
        self.reference.encode(&self.inner, text).map_err(Error::Encode)
    }

    /// Number of tokens of `text` (for token estimation).
    pub fn count(&self, text: &str) -> Result<usize, Error> {
        self.encode(text).map(|ids| ids.len())
    }

    /// Encodes every text with the engine and with the `tokenizers` crate and reports where
    /// they differ (`zephon check-tokenizer`). With the `tokenizers` engine both are the same
    /// code, so only errors can show.
    pub fn check_against_reference<S: AsRef<str>>(&self, texts: impl IntoIterator<Item = S>) -> CheckReport {
        let mut report = CheckReport { engine: self.engine.clone(), ..CheckReport::default() };
        for (doc, text) in texts.into_iter().enumerate() {
            report.docs += 1;
            let text = text.as_ref();
            let (ours, theirs) = match (self.encode(text), self.encode_reference(text)) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) => {
                    report.errors.push((doc, format!("engine: {e}")));
                    continue;
                }
                (_, Err(e)) => {
                    report.errors.push((doc, format!("tokenizers crate: {e}")));
                    continue;
                }
            };
            report.tokens += theirs.len();
            if ours != theirs {
                let position = ours.iter().zip(&theirs).take_while(|(a, b)| a == b).count();
                report.mismatches.push(Mismatch {
                    doc,
                    position,
                    ours: ours.get(position).copied(),
                    theirs: theirs.get(position).copied(),
                });
            }
        }
        report
    }

    /// The underlying `tokenizers` tokenizer (truncation and padding cleared).
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// The ids of `text` (as [`Tokenizer::encode`]) and the byte range of `text` each one
    /// covers. A byte-level vocabulary gives them by the ids' own bytes; where those do not
    /// spell the text (a normalizer changed it) or the vocabulary is not byte-level, they come
    /// from the `tokenizers` crate's offsets.
    pub fn encode_with_offsets(&self, text: &str) -> Result<(Vec<u32>, Vec<std::ops::Range<usize>>), Error> {
        let ids = self.encode(text)?;
        if let Some(table) = self.token_bytes.get_or_init(|| token_bytes(&self.inner)) {
            let bytes = text.as_bytes();
            let mut offsets = Vec::with_capacity(ids.len());
            let mut at = 0;
            for &id in &ids {
                match table.get(id as usize) {
                    Some(b) if bytes.get(at..at + b.len()) == Some(&b[..]) => {
                        offsets.push(at..at + b.len());
                        at += b.len();
                    }
                    _ => break,
                }
            }
            if at == bytes.len() && offsets.len() == ids.len() {
                return Ok((ids, offsets));
            }
        }
        let enc = self.inner.encode(text, false).map_err(|e| Error::Encode(e.to_string()))?;
        Ok((enc.get_ids().to_vec(), enc.get_offsets().iter().map(|&(a, b)| a..b).collect()))
    }
}

/// Each id's bytes, when every entry of the model's vocabulary is spelt in the byte-level
/// alphabet (added tokens are their own text); `None` otherwise.
fn token_bytes(inner: &tokenizers::Tokenizer) -> Option<TokenBytes> {
    let chars = crate::bpe::byte_chars();
    let byte_of = |c: char| chars.iter().position(|&x| x == c).map(|b| b as u8);
    let mut table: Vec<Box<[u8]>> = vec![Box::default(); inner.get_vocab_size(true)];
    for (token, id) in inner.get_vocab(false) {
        let bytes: Vec<u8> = token.chars().map(byte_of).collect::<Option<_>>()?;
        *table.get_mut(id as usize)? = bytes.into();
    }
    for (id, t) in inner.get_added_tokens_decoder() {
        *table.get_mut(id as usize)? = t.content.as_bytes().into();
    }
    Some(table)
}

/// BPE dropout drops merges at random on every encode: two runs over the same data would
/// give different ids, and no checkpoint could be restored exactly.
fn refuse_dropout(json: &Json, source: &str) -> Result<(), Error> {
    let dropout = &json["model"]["dropout"];
    if dropout.is_null() || dropout.as_f64() == Some(0.0) {
        return Ok(());
    }
    Err(Error::Unsupported {
        path: source.to_string(),
        setting: format!("BPE dropout {dropout}"),
        why: "dropout draws random numbers on every encode, so two runs would give different ids; \
              set \"dropout\": null"
            .to_string(),
    })
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer({}, sha256 {}, {})", self.source, &self.sha256[..12], self.engine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fast path that is wrong on purpose (GPT-2 without its first merge, `Ġ t`): the
    /// check finds every text it gets wrong, at the first differing token.
    #[test]
    fn check_against_reference_reports_the_first_difference() {
        let path = zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json");
        let mut tok = Tokenizer::from_file(&path).unwrap();
        let mut json: Json = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let merges = json["model"]["merges"].as_array_mut().unwrap();
        assert_eq!(merges[0], "Ġ t");
        merges.remove(0);
        tok.fast = Some(Arc::new(crate::bpe::build(&json, &[]).unwrap()));

        let texts = ["Hello world", "I saw the cat", "", "them, the, to"];
        let report = tok.check_against_reference(texts);
        assert_eq!((report.docs, report.errors.len()), (4, 0));
        let want: Vec<Mismatch> = texts
            .iter()
            .enumerate()
            .filter_map(|(doc, t)| {
                let (a, b) = (tok.encode(t).unwrap(), tok.encode_reference(t).unwrap());
                let position = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
                (a != b).then(|| Mismatch {
                    doc,
                    position,
                    ours: a.get(position).copied(),
                    theirs: b.get(position).copied(),
                })
            })
            .collect();
        assert_eq!(report.mismatches, want);
        assert_eq!(report.mismatches.iter().map(|m| m.doc).collect::<Vec<_>>(), [1, 3]);
        // "I saw the cat": `I`, ` saw` agree; ` the` differs.
        assert_eq!(report.mismatches[0].position, 2);
        assert!(!report.is_ok());
        assert!(report.to_string().contains("first: text 1 at token 2"), "{report}");
        assert_eq!(report.tokens, texts.iter().map(|t| tok.encode_reference(t).unwrap().len()).sum::<usize>());
    }
}
