//! Images in a token stream: each image a record carries becomes a run of placeholder tokens,
//! and the image is placed on that run. [`crate::Tokenize`] and [`crate::Chat`] share it, so a
//! caption and a conversation place their images by one rule.

use std::ops::Range;

use zephon_operator::{Attachment, Field, Record, Settings, SettingsValue, Span, Value, columns};

use crate::tokenizer::{Error, Tokenizer};

/// How images a record carries (attachments of one kind, each with an `image_tokens` count set
/// by the image operator) become placeholder tokens in the text.
///
/// Each `marker` in the text (`<image>`, or the `<|vision_start|><|image_pad|><|vision_end|>`
/// a Qwen2-VL chat template writes) stands for the record's next image, in item order; it is
/// replaced by `[start] placeholder × image_tokens [end]`, and the image is placed on that
/// span, atomic (no split or row boundary cuts it). For [`crate::Tokenize`], a text without
/// markers gets its images first, before the text (image-caption pairs); for
/// [`crate::Chat`], the template must write one marker per image. Any other count of markers
/// than images is a bad record. Text between markers is tokenized piece by piece, as a
/// tokenizer that treats the placeholder as an added token would.
#[derive(Clone, Debug)]
pub struct ImagePlaceholders {
    pub(crate) kind: Field,
    marker: String,
    placeholder: (String, u32),
    start: Option<(String, u32)>,
    end: Option<(String, u32)>,
}

/// Whether a text without markers takes its images before it or is refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Markers {
    /// No markers: the images come first (captions).
    OrImagesFirst,
    /// Exactly one marker per image (conversations: the template writes them).
    Required,
}

impl ImagePlaceholders {
    /// Images of kind `kind` (`image`), marked by `marker` in the text, replaced by token
    /// `placeholder` (an added token of `tokenizer`, e.g. `<image>` or `<|image_pad|>`).
    pub fn new(tokenizer: &Tokenizer, kind: &str, marker: &str, placeholder: &str) -> Result<Self, Error> {
        if marker.is_empty() {
            return Err(Error::Config("the image marker must not be empty".into()));
        }
        Ok(ImagePlaceholders {
            kind: Field::new(kind),
            marker: marker.to_string(),
            placeholder: (placeholder.to_string(), tokenizer.token_id(placeholder)?),
            start: None,
            end: None,
        })
    }

    /// Tokens around each image's placeholders (Qwen2-VL: `<|vision_start|>`, `<|vision_end|>`).
    pub fn around(mut self, tokenizer: &Tokenizer, start: &str, end: &str) -> Result<Self, Error> {
        self.start = Some((start.to_string(), tokenizer.token_id(start)?));
        self.end = Some((end.to_string(), tokenizer.token_id(end)?));
        Ok(self)
    }

    /// The settings an operator placing images fingerprints.
    pub(crate) fn settings(&self) -> Settings {
        let token = |t: &Option<(String, u32)>| -> SettingsValue {
            t.as_ref().map_or(SettingsValue::None, |(text, id)| SettingsValue::List(vec![text.into(), (*id).into()]))
        };
        Settings::new("image_placeholders", 1)
            .set("kind", self.kind.as_str())
            .set("marker", &self.marker)
            .set("placeholder", token(&Some(self.placeholder.clone())))
            .set("start", token(&self.start))
            .set("end", token(&self.end))
    }

    /// One line for plans: `image "<image>" markers become <image> × image_tokens`.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} {:?} markers become {}{} × image_tokens{}",
            self.kind,
            self.marker,
            self.start.as_ref().map_or(String::new(), |s| format!("{} ", s.0)),
            self.placeholder.0,
            self.end.as_ref().map_or(String::new(), |e| format!(" {}", e.0)),
        )
    }

    /// Whether `record` carries images of this kind.
    pub(crate) fn carried_by(&self, record: &Record) -> bool {
        record.attachments().iter().any(|a| a.kind() == &self.kind)
    }

    /// The ids of `text` with the record's images in it: each marker (or, with none and
    /// [`Markers::OrImagesFirst`], the start) becomes the image's placeholder run, and the
    /// image is placed on that span, positions counted from `first` (1 after a BOS).
    ///
    /// With `offsets`, each id's byte range in `text` is pushed there: a piece's tokens their
    /// own, a placeholder run the marker's bytes (or an empty range at 0 before the text).
    pub(crate) fn place(
        &self,
        tokenizer: &Tokenizer,
        text: &str,
        record: &mut Record,
        markers_rule: Markers,
        first: u32,
        mut offsets: Option<&mut Vec<Range<usize>>>,
    ) -> Result<Vec<u32>, String> {
        let mut images: Vec<Attachment> = Vec::new();
        let mut others = Vec::new();
        for a in record.take_attachments() {
            if a.kind() == &self.kind { images.push(a) } else { others.push(a) }
        }
        images.sort_by_key(Attachment::item);
        let pieces: Vec<(usize, &str)> = split_at_markers(text, &self.marker);
        let markers = pieces.len() - 1;
        if (markers != 0 || markers_rule == Markers::Required) && markers != images.len() {
            return Err(format!("the text has {markers} {:?} markers for {} images", self.marker, images.len()));
        }
        let mut ids: Vec<u32> = Vec::with_capacity(text.len() / 3 + 16);
        let place =
            |ids: &mut Vec<u32>, a: Attachment, bytes: Range<usize>, offsets: &mut Option<&mut Vec<Range<usize>>>| {
                let n = match a.get(columns::IMAGE_TOKENS) {
                    Some(Value::Int(n)) if *n > 0 => *n as usize,
                    _ => {
                        return Err(format!(
                            "{} #{} has no image_tokens: put the images operator before the operator placing it",
                            self.kind,
                            a.item()
                        ));
                    }
                };
                let start = ids.len();
                ids.extend(self.start.as_ref().map(|s| s.1));
                ids.extend(std::iter::repeat_n(self.placeholder.1, n));
                ids.extend(self.end.as_ref().map(|e| e.1));
                if let Some(o) = offsets {
                    o.extend(std::iter::repeat_n(bytes, ids.len() - start));
                }
                let span = u32::try_from(start)
                    .ok()
                    .zip(u32::try_from(ids.len() - start).ok())
                    .and_then(|(s, len)| Span::at(s.checked_add(first)?, len))
                    .ok_or_else(|| "an image span overflows".to_string())?;
                Ok(a.placed(span, true))
            };
        let mut placed = Vec::with_capacity(images.len());
        let mut images = images.into_iter();
        if markers == 0 {
            for a in images.by_ref() {
                placed.push(place(&mut ids, a, 0..0, &mut offsets)?);
            }
        }
        for (i, &(at, piece)) in pieces.iter().enumerate() {
            if i > 0 {
                let a = images.next().ok_or_else(|| "more markers than images".to_string())?;
                placed.push(place(&mut ids, a, at - self.marker.len()..at, &mut offsets)?);
            }
            if piece.is_empty() {
                continue;
            }
            match offsets.as_deref_mut() {
                Some(o) => {
                    let (piece_ids, piece_offsets) = tokenizer.encode_with_offsets(piece).map_err(|e| e.to_string())?;
                    ids.extend(piece_ids);
                    o.extend(piece_offsets.into_iter().map(|r| r.start + at..r.end + at));
                }
                None => ids.extend(tokenizer.encode(piece).map_err(|e| e.to_string())?),
            }
        }
        for a in placed.into_iter().chain(others) {
            record.attach(a);
        }
        Ok(ids)
    }
}

/// The pieces of `text` between occurrences of `marker`, each with its byte offset.
fn split_at_markers<'t>(text: &'t str, marker: &str) -> Vec<(usize, &'t str)> {
    let mut pieces = Vec::new();
    let mut at = 0;
    for (m, _) in text.match_indices(marker) {
        pieces.push((at, &text[at..m]));
        at = m + marker.len();
    }
    pieces.push((at, &text[at..]));
    pieces
}

#[cfg(test)]
mod tests {
    use super::split_at_markers;

    #[test]
    fn pieces_keep_their_offsets() {
        assert_eq!(split_at_markers("a<i>bc<i>", "<i>"), vec![(0, "a"), (4, "bc"), (9, "")]);
        assert_eq!(split_at_markers("none", "<i>"), vec![(0, "none")]);
    }
}
