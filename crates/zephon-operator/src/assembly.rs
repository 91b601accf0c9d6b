//! What operators tell each other when a pipeline is put together: each states what it
//! offers ([`Offer`]) and adapts itself to what the others offer ([`Operator::assemble`]).
//!
//! Without this, the code that assembles a pipeline must know every operator: that
//! `ensure_mixture` measures shares past the packer's open rows, that a shuffle after it keeps
//! its slack, that a packer's pad id must be a token of the tokenizer. Here each operator says
//! so itself, and a new operator (built in or third party) is assembled by the same loop.
//!
//! [`Operator::assemble`]: crate::Operator::assemble

use std::fmt;
use std::sync::Arc;

use crate::Digest;

/// What an operator tells the others of its pipeline. Every fact is optional; an operator
/// offers those it knows. New facts are added as new fields (the struct is non-exhaustive:
/// build one with [`Offer::none`] and the `with_*` methods).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Offer {
    /// Token ids of its output are below this (a tokenizer's vocabulary size).
    pub vocab_size: Option<usize>,
    /// Sequence positions it holds for good in every lane (a packer's open rows): what an
    /// operator before it measuring the output sees only later.
    pub held_positions: Option<u64>,
    /// The length it cuts longer documents to (a truncating packer).
    pub truncates_to: Option<u64>,
    /// The tokens of the rows it makes (a packer's sequence length).
    pub row_length: Option<usize>,
    /// The token-share slack it keeps (`ensure_mixture`), which a reorder after it should keep.
    pub share_slack: Option<u64>,
    /// The attachment kind it decodes (`image`), which an operator placing those attachments
    /// in token sequences must come after.
    pub decodes: Option<String>,
    /// How it counts the tokens a row becomes (an operator that tokenizes a field), with which
    /// a pipeline plans token shares.
    pub counts_tokens: Option<TokenCounter>,
    /// The most its accumulator holds in one lane, with which a pipeline states the memory
    /// its lanes may take.
    pub holds: Option<Holding>,
}

/// The most an accumulator holds in one lane at any time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Holding {
    /// Sequence positions (tokens): a packer's open rows, `ensure_mixture`'s held pieces.
    Positions(u64),
    /// Records: rows of the pipeline's row length after a packer (a shuffle buffer), records as
    /// they come (documents, pieces) before one.
    Records(u64),
    /// Nothing: it passes each record on as it comes, one for one and in order (an
    /// accumulator that only counts), so it neither holds nor reorders nor merges records.
    Nothing,
}

impl Offer {
    /// Offers nothing.
    pub fn none() -> Self {
        Offer::default()
    }

    /// Offers a vocabulary size.
    #[must_use]
    pub fn with_vocab_size(mut self, n: usize) -> Self {
        self.vocab_size = Some(n);
        self
    }

    /// Offers the positions held for good per lane.
    #[must_use]
    pub fn with_held_positions(mut self, n: u64) -> Self {
        self.held_positions = Some(n);
        self
    }

    /// Offers the length of the rows it makes.
    #[must_use]
    pub fn with_row_length(mut self, n: usize) -> Self {
        self.row_length = Some(n);
        self
    }

    /// Offers the length documents are truncated to.
    #[must_use]
    pub fn with_truncation(mut self, n: u64) -> Self {
        self.truncates_to = Some(n);
        self
    }

    /// Offers the share slack kept.
    #[must_use]
    pub fn with_share_slack(mut self, n: u64) -> Self {
        self.share_slack = Some(n);
        self
    }

    /// Offers an attachment kind decoded.
    #[must_use]
    pub fn with_decodes(mut self, kind: &str) -> Self {
        self.decodes = Some(kind.to_string());
        self
    }

    /// Offers a way to count the tokens a row becomes.
    #[must_use]
    pub fn with_token_counter(mut self, counter: TokenCounter) -> Self {
        self.counts_tokens = Some(counter);
        self
    }

    /// Offers the most its accumulator holds in one lane.
    #[must_use]
    pub fn with_holding(mut self, holding: Holding) -> Self {
        self.holds = Some(holding);
        self
    }
}

/// The tokens an operator makes of one row's field, counted without running the pipeline: a
/// pipeline mixing datasets by token shares samples rows of each dataset and counts them, to
/// plan how many rows make a share (token estimates).
///
/// The count is of what the operator delivers for the row, after its own truncation or
/// skipping; a row it would refuse counts 0, as it delivers nothing. The field is counted
/// whole (a conversation cannot be cut into windows of text).
#[derive(Clone)]
pub struct TokenCounter {
    field: String,
    settings: Digest,
    count: Arc<dyn Fn(&str) -> usize + Send + Sync>,
}

impl TokenCounter {
    /// Counts the field `field` with `count`; `settings` is the digest of everything the count
    /// depends on (tokenizer, template, limits), under which estimates may be cached.
    pub fn new(field: &str, settings: Digest, count: impl Fn(&str) -> usize + Send + Sync + 'static) -> Self {
        TokenCounter { field: field.to_string(), settings, count: Arc::new(count) }
    }

    /// The field it counts.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The digest of what the count depends on.
    pub fn settings(&self) -> Digest {
        self.settings
    }

    /// The tokens the operator makes of a row whose field holds `text`.
    pub fn count(&self, text: &str) -> usize {
        (self.count)(text)
    }
}

impl fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenCounter").field("field", &self.field).field("settings", &self.settings).finish()
    }
}

/// Counters are equal when they count the same field under the same settings.
impl PartialEq for TokenCounter {
    fn eq(&self, other: &Self) -> bool {
        self.field == other.field && self.settings == other.settings
    }
}

impl Eq for TokenCounter {}

/// One other operator of the pipeline, as an operator being assembled sees it.
#[derive(Clone, Debug)]
pub struct Neighbour {
    /// Its name ([`Operator::name`](crate::Operator::name)).
    pub name: String,
    /// What it offers.
    pub offer: Offer,
}

/// A weight on the loss: finite and at least 0. Equal and hashed by its bits, so that settings
/// holding one stay comparable.
#[derive(Copy, Clone, Debug, PartialEq, PartialOrd)]
pub struct LossWeight(f32);

impl LossWeight {
    /// Weight 1.
    pub const ONE: LossWeight = LossWeight(1.0);

    /// `w`, or `None` when it is negative, infinite or NaN.
    pub fn new(w: f32) -> Option<LossWeight> {
        (w.is_finite() && w >= 0.0).then_some(LossWeight(w))
    }

    /// The weight.
    pub fn get(self) -> f32 {
        self.0
    }
}

impl Eq for LossWeight {}

impl std::hash::Hash for LossWeight {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

impl std::fmt::Display for LossWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The shortest text that reads back as the same f32.
        write!(f, "{}", self.0)
    }
}

/// What a dataset's tokens weigh on the loss: the dataset's weight, times each record's from
/// `field` when one is named. For an operator that writes per-token loss weights (the packer).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DatasetLossWeight {
    /// The dataset's weight.
    pub weight: LossWeight,
    /// The field of its records holding each record's weight (a number, finite, at least 0).
    pub field: Option<String>,
}

impl Default for DatasetLossWeight {
    fn default() -> Self {
        DatasetLossWeight { weight: LossWeight::ONE, field: None }
    }
}

/// What the pipeline knows when one of its operators is assembled.
#[derive(Clone, Copy, Debug)]
pub struct Assembly<'a> {
    /// The datasets' names, in the run's dataset order.
    pub datasets: &'a [String],
    /// Each dataset's text field, in dataset order.
    pub text_fields: &'a [String],
    /// The datasets' token shares, when the mixture is given by shares (they sum to 1).
    pub shares: Option<&'a [f64]>,
    /// What each dataset's tokens weigh on the loss, in dataset order (empty: all weigh 1).
    pub loss_weights: &'a [DatasetLossWeight],
    /// The operators before this one, nearest first.
    pub before: &'a [Neighbour],
    /// The operators after this one, nearest first.
    pub after: &'a [Neighbour],
}

impl<'a> Assembly<'a> {
    /// The nearest operator before this one offering what `fact` picks.
    pub fn before<T>(&self, fact: impl Fn(&Offer) -> Option<T>) -> Option<(&'a str, T)> {
        self.before.iter().find_map(|n| fact(&n.offer).map(|v| (n.name.as_str(), v)))
    }

    /// The nearest operator after this one offering what `fact` picks.
    pub fn after<T>(&self, fact: impl Fn(&Offer) -> Option<T>) -> Option<(&'a str, T)> {
        self.after.iter().find_map(|n| fact(&n.offer).map(|v| (n.name.as_str(), v)))
    }
}
