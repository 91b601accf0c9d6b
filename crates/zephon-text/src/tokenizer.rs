//! A loaded tokenizer with its identity.

use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};

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
}

/// A Hugging Face tokenizer, shared between threads, identified by the SHA-256 of its
/// `tokenizer.json`.
///
/// Byte-level BPE files (GPT-2 and its kin) are encoded by an exact fast path that produces
/// ids without `tokenizers`' per-token objects (see [`Tokenizer::engine`]); every other file
/// by the `tokenizers` crate.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<tokenizers::Tokenizer>,
    fast: Option<Arc<crate::bpe::ByteLevelBpe>>,
    engine: String,
    sha256: String,
    source: String,
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
        let inner = tokenizers::Tokenizer::from_bytes(bytes)
            .map_err(|e| Error::Parse { path: source.to_string(), message: e.to_string() })?;
        Ok(Tokenizer::assemble(inner, bytes, source))
    }

    /// Picks the engine: the fast path when the file is of its family and it agrees with
    /// `tokenizers` on the self-check text, else `tokenizers`.
    fn assemble(inner: tokenizers::Tokenizer, bytes: &[u8], source: &str) -> Self {
        let (fast, engine) = match serde_json::from_slice::<serde_json::Value>(bytes)
            .map_err(|e| e.to_string())
            .and_then(|json| crate::bpe::build(&json))
        {
            Ok(bpe) => {
                let added: Vec<String> = inner.get_added_tokens_decoder().values().map(|t| t.content.clone()).collect();
                let agrees = crate::bpe::self_check_texts(&added).iter().all(|text| {
                    let mut ids = Vec::new();
                    bpe.encode(text, &mut ids).is_ok()
                        && inner.encode_fast(text.as_str(), false).is_ok_and(|e| e.get_ids() == ids.as_slice())
                });
                if agrees {
                    (Some(Arc::new(bpe)), "byte-level BPE, exact fast path".to_string())
                } else {
                    (None, "tokenizers crate (the fast path disagreed on its self-check)".to_string())
                }
            }
            Err(why) => (None, format!("tokenizers crate (no fast path: {why})")),
        };
        Tokenizer {
            inner: Arc::new(inner),
            fast,
            engine,
            sha256: hex::encode(Sha256::digest(bytes)),
            source: source.to_string(),
        }
    }

    /// Wraps a tokenizer built in code (its identity is the hash of its serialized form).
    pub fn from_tokenizer(inner: tokenizers::Tokenizer, source: &str) -> Result<Self, Error> {
        let json =
            inner.to_string(false).map_err(|e| Error::Parse { path: source.to_string(), message: e.to_string() })?;
        Ok(Tokenizer::assemble(inner, json.as_bytes(), source))
    }

    /// SHA-256 of the tokenizer's JSON: part of every fingerprint that depends on it.
    pub fn sha256(&self) -> &str {
        &self.sha256
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

    /// Which engine encodes: the exact fast path, or the `tokenizers` crate (and why).
    pub fn engine(&self) -> &str {
        &self.engine
    }

    /// Token ids of `text`, with no special tokens added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        match &self.fast {
            Some(bpe) => {
                let mut ids = Vec::with_capacity(text.len() / 3 + 1);
                bpe.encode(text, &mut ids)?;
                Ok(ids)
            }
            None => self.encode_reference(text),
        }
    }

    /// At least the first `min` token ids of `text` (all of them when it has fewer), and
    /// whether the text was encoded to its end. Only the fast path stops early.
    pub fn encode_prefix(&self, text: &str, min: usize) -> Result<(Vec<u32>, bool), String> {
        match &self.fast {
            Some(bpe) => {
                let mut ids = Vec::with_capacity(min.min(text.len()) + 1);
                let whole = bpe.encode_until(text, min, &mut ids)?;
                Ok((ids, whole))
            }
            None => self.encode_reference(text).map(|ids| (ids, true)),
        }
    }

    /// Token ids of `text` from the `tokenizers` crate, whatever the engine (the reference
    /// the fast path is checked against).
    pub fn encode_reference(&self, text: &str) -> Result<Vec<u32>, String> {
        self.inner.encode_fast(text, false).map(|e| e.get_ids().to_vec()).map_err(|e| e.to_string())
    }

    /// Number of tokens of `text` (for token estimation).
    pub fn count(&self, text: &str) -> Result<usize, String> {
        self.encode(text).map(|ids| ids.len())
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer({}, sha256 {}, {})", self.source, &self.sha256[..12], self.engine)
    }
}
