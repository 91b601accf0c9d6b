//! The names of the fields and attachment values that training rows carry: one list, shared
//! by the operators that write them (tokenize, pack, images) and the sinks that read them
//! (candle, the Python binding), so that neither side depends on the other for a name.

/// The token sequence of a document (`Seq` of `u32`): what tokenize writes and packers read.
pub const TOKENS: &str = "tokens";
/// Row field: token ids, `U32[T]`, padded with `pad_id`.
pub const INPUT_IDS: &str = "input_ids";
/// Row field: next-token targets, `I32[T]`; `ignore_index` at the last token of each segment
/// and on padding.
pub const LABELS: &str = "labels";
/// Row field: position within the segment, `I32[T]`, restarting at 0 at each segment; 0 on
/// padding.
pub const POSITIONS: &str = "positions";
/// Row field: segment number, `I32[T]`, 1..=k for the k segments, 0 on padding.
pub const SEGMENT_IDS: &str = "segment_ids";
/// Row field: flash-attn varlen cumulative sequence lengths, `I32[S + 2]`: 0, the end of each
/// segment, T when there is padding (the padding is one more sequence), then T repeated.
pub const CU_SEQLENS: &str = "cu_seqlens";
/// Row field: the longest sequence among the segments and the padding run, `Int`.
pub const MAX_SEQLEN: &str = "max_seqlen";
/// Row field: 1 where the label is a real target, `U8[T]`.
pub const LOSS_MASK: &str = "loss_mask";
/// Each position's dataset, its index in the run (`u16`; `u16::MAX` in padding): packer rows, on request.
pub const SOURCE_IDS: &str = "source_ids";
/// Each position's weight on the loss (`f32`): `loss_mask` times its document's weight; packer rows, on request.
pub const LOSS_WEIGHTS: &str = "loss_weights";
/// Row field: non-padding tokens, `Int`.
pub const NUM_TOKENS: &str = "num_tokens";
/// Attachment value: the 1-based segment of the row the attachment belongs to, set when a
/// piece enters a row.
pub const SEGMENT: &str = "segment";
/// Attachment kind of images.
pub const IMAGE: &str = "image";
/// Image attachment value: the encoded image as a reader yields it (removed once decoded).
pub const IMAGE_BYTES: &str = "bytes";
/// Image attachment value: where the image came from (member, path), for provenance.
pub const IMAGE_SOURCE: &str = "source";
/// Image attachment value: the pixels (layout per the image operator's settings).
pub const PIXEL_VALUES: &str = "pixel_values";
/// Image attachment value: the patch grid `(t, h, w)`.
pub const IMAGE_GRID_THW: &str = "image_grid_thw";
/// Image attachment value: how many placeholder tokens the image takes in the text.
pub const IMAGE_TOKENS: &str = "image_tokens";
