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
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<tokenizers::Tokenizer>,
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
        Ok(Tokenizer { inner: Arc::new(inner), sha256: hex::encode(Sha256::digest(bytes)), source: source.to_string() })
    }

    /// Wraps a tokenizer built in code (its identity is the hash of its serialized form).
    pub fn from_tokenizer(inner: tokenizers::Tokenizer, source: &str) -> Result<Self, Error> {
        let json =
            inner.to_string(false).map_err(|e| Error::Parse { path: source.to_string(), message: e.to_string() })?;
        Ok(Tokenizer {
            inner: Arc::new(inner),
            sha256: hex::encode(Sha256::digest(json.as_bytes())),
            source: source.to_string(),
        })
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

    /// Token ids of `text`, with no special tokens added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.inner.encode_fast(text, false).map(|e| e.get_ids().to_vec()).map_err(|e| e.to_string())
    }

    /// Number of tokens of `text` (for token estimation).
    pub fn count(&self, text: &str) -> Result<usize, String> {
        self.inner.encode_fast(text, false).map(|e| e.len()).map_err(|e| e.to_string())
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer({}, sha256 {})", self.source, &self.sha256[..12])
    }
}
