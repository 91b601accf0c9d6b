//! The crate's error type: bad settings, bad input records, bad checkpoint state.

use zephon_operator::OpError;

/// Everything that can go wrong while configuring or running a packer.
///
/// Settings errors come from [`crate::Pack::new`]. While running, errors reach the engine as an
/// [`OpError`]: a bad input record is [`OpError::Data`] (skippable under a skip policy), a
/// state or lineage that cannot be restored is [`OpError::Fatal`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    /// `seq_len` is 0.
    #[error("seq_len must be at least 1")]
    ZeroSeqLen,

    /// `seq_len` does not fit the `i32` positions and `cu_seqlens`.
    #[error("seq_len {0} is too large: positions and cu_seqlens are i32")]
    SeqLenTooLarge(usize),

    /// A first-fit or best-fit packer with no open rows.
    #[error("bins must be at least 1")]
    ZeroBins,

    /// `max_segments` is 0.
    #[error("max_segments must be at least 1")]
    ZeroMaxSegments,

    /// More segments than tokens per row: never reachable, and it would make `cu_seqlens` huge.
    #[error("max_segments {max_segments} exceeds seq_len {seq_len}: a row cannot hold more segments than tokens")]
    TooManySegments {
        /// The requested cap.
        max_segments: usize,
        /// The row length.
        seq_len: usize,
    },

    /// A non-negative `ignore_index` could equal a real label and hide it from the loss.
    #[error("ignore_index {0} must be negative so that it never equals a token id")]
    IgnoreIndex(i32),

    /// The input field name is empty.
    #[error("input_field must not be empty")]
    EmptyInputField,

    /// An input record without the token field.
    #[error("record {lineage}: no field `{field}` (the packer needs token ids; is a tokenizer before it?)")]
    MissingField {
        /// The record's lineage.
        lineage: String,
        /// The field looked for.
        field: String,
    },

    /// The token field has the wrong type.
    #[error("record {lineage}: field `{field}` must be a Seq of u32 token ids, found {found}")]
    WrongType {
        /// The record's lineage.
        lineage: String,
        /// The field.
        field: String,
        /// What was there.
        found: String,
    },

    /// An input record whose lineage is not a single fragment.
    #[error("record {lineage}: a document must have a lineage of exactly one fragment")]
    NotOneFragment {
        /// The record's lineage.
        lineage: String,
    },

    /// An input record whose fragment length differs from its token count.
    #[error("record {lineage}: the lineage spans {span} positions but field `{field}` has {tokens} tokens")]
    LengthMismatch {
        /// The record's lineage.
        lineage: String,
        /// The field.
        field: String,
        /// Positions the fragment spans (`end - start`, negative for a reversed fragment).
        span: i64,
        /// Tokens in the field.
        tokens: usize,
    },

    /// A token id above `i32::MAX` cannot be written into the `i32` labels.
    #[error("record {lineage}: token id {id} does not fit the i32 labels")]
    TokenTooLarge {
        /// The record's lineage.
        lineage: String,
        /// The offending id.
        id: u32,
    },

    /// An attachment outside its record's tokens, or one no row can hold whole.
    #[error("record {lineage}: {message}")]
    Attachment {
        /// The record's lineage.
        lineage: String,
        /// What is wrong.
        message: String,
    },

    /// A record's loss weight field is missing, not a number, negative or not finite.
    #[error("record {lineage}: field `{field}` must hold the record's loss weight, a finite number ≥ 0; found {found}")]
    LossWeight {
        /// The record's lineage.
        lineage: String,
        /// The weight field.
        field: String,
        /// What was there.
        found: String,
    },

    /// More datasets than `source_ids` (u16) can name.
    #[error("dataset #{0} does not fit the u16 source_ids (at most 65,535 datasets)")]
    TooManySources(u32),

    /// A checkpointed state or a row lineage that this packer cannot have produced.
    #[error("pack state: {0}")]
    State(String),
}

impl PackError {
    /// Whether the error is about one input record (and so skippable).
    pub fn is_data(&self) -> bool {
        matches!(
            self,
            PackError::MissingField { .. }
                | PackError::WrongType { .. }
                | PackError::NotOneFragment { .. }
                | PackError::LengthMismatch { .. }
                | PackError::TokenTooLarge { .. }
                | PackError::Attachment { .. }
                | PackError::LossWeight { .. }
        )
    }
}

impl From<PackError> for OpError {
    fn from(e: PackError) -> Self {
        if e.is_data() { OpError::Data(e.to_string()) } else { OpError::Fatal(e.to_string()) }
    }
}
