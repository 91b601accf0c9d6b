//! Tokenization for zephon: any Hugging Face `tokenizer.json` as a stateless operator.
//!
//! The one design decision: **tokenizing is the stateless part**. [`Tokenize`] is a pure
//! function of one document, so the engine runs it on every core, in any order, and again
//! during a restore; it is where the pipeline's CPU goes. The tokenizer's own parallelism is
//! never used (one document per call), so it cannot oversubscribe the engine's threads.
//!
//! A tokenized document's sequence axis is its token positions: its lineage becomes
//! `(sample, 0..n)`, and a long document split into pieces gives each piece its own range, so
//! packers downstream can cut and checkpoint by token range.
//!
//! The tokenizer is the pipeline's whole CPU cost, so byte-level BPE files (GPT-2, Llama-3,
//! GPT-4o, Qwen, DeepSeek-V3 and their kin) go through an exact fast path that computes ids
//! only: the same normalization, pre-tokenization, merges and added tokens as the
//! `tokenizers` crate, checked against it when the file is loaded and in the tests, several
//! times faster because it builds no per-token objects and never backtracks. Any other file
//! (SentencePiece-style, WordPiece, Unigram...) is encoded by `tokenizers` itself;
//! [`Tokenizer::engine`] says which setting kept it off the fast path, and
//! [`Tokenizer::check_against_reference`] compares the two engines on any texts.
//!
//! Loading makes a `tokenizer.json` fit for a deterministic loader: its `truncation` and
//! `padding` are cleared (lengths are the pipeline's business; [`Tokenizer::load_notes`] says
//! what was cleared), BPE dropout (random ids) is refused, and special tokens written inside
//! document text are read as text unless [`Tokenizer::allow_special_tokens_in_text`] opts in.
//! Long whitespace runs, which make the regex engine behind `tokenizers` fail (silently,
//! there), are pre-tokenized by hand. [`Tokenizer::fingerprint`] covers all of it.
//!
//! What this crate is not: it packs nothing (`zephon-pack`) and does not train tokenizers; it
//! loads them. The tokenizer file's SHA-256 is part of the operator's fingerprint, so a
//! checkpoint never restores under another tokenizer.

#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

mod added;
mod bpe;
mod chat;
mod checked_encoder;
mod merge_table;
mod nfc;
mod piece_cache;
mod placeholders;
mod pretok;
mod pretokenized;
mod split;
#[cfg(test)]
mod test_texts;
mod tokenize;
mod tokenizer;
mod vocab_table;

pub use chat::{AssistantSpan, Chat, ChatTemplate, LongConversations, LossOn, Rendered};
pub use placeholders::ImagePlaceholders;
pub use pretokenized::PreTokenized;
pub use tokenize::{LongCut, LongDocuments, Tokenize};
pub use tokenizer::{CheckReport, Error, Mismatch, Tokenizer};
