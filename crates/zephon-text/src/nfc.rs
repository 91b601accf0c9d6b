//! Unicode NFC, the one normalizer the fast path accepts.
//!
//! Both halves of the fast path apply it: the added-token search (to the text between
//! non-normalized tokens, before the normalized ones are looked for) and the BPE encoder (to
//! the text of each segment, and to added tokens' own contents when it is built). It lives here
//! so that neither of them depends on the other for it.

use std::borrow::Cow;

/// `text` in Unicode NFC, as `tokenizers`' `NFC` normalizer computes it.
pub(crate) fn nfc(text: &str) -> Cow<'_, str> {
    use unicode_normalization_alignments::{IsNormalized, UnicodeNormalization, is_nfc_quick};
    // ASCII and most text is NFC already: checked without allocating.
    if text.is_ascii() || is_nfc_quick(text.chars()) == IsNormalized::Yes {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.nfc().map(|(c, _)| c).collect())
}
