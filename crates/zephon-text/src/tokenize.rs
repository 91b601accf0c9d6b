//! The tokenize operator.

use zephon_operator::{
    Assembly, Field, Fragment, Lineage, Offer, OpError, Operator, Record, Settings, SettingsValue, Span, Value,
};

use crate::placeholders::{ImagePlaceholders, Markers};
use crate::tokenizer::{Error, Tokenizer};

/// What tokenize does with a document longer than `max_tokens`, as it tokenizes it.
///
/// Cutting here, rather than only in the packer, makes each piece a record of its own with its
/// own token range: a packer, a shuffle or `ensure_mixture` then moves pieces of a bounded size,
/// and a restore re-tokenizes a piece's prefix, never the whole document. A packer has its own
/// setting at its own limit, the row length (`zephon_pack::LongerThanRow`), for what still
/// arrives longer than a row; with `Keep` that is every long document.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LongDocuments {
    /// Keep it whole (a packer downstream cuts it at its row length).
    Keep,
    /// Cut it into pieces of at most `max_tokens`, each its own record (lineage ranges
    /// `0..m`, `m..2m`, ...).
    Split {
        /// Tokens per piece.
        max_tokens: usize,
    },
    /// Keep the first `max_tokens` tokens, drop the rest.
    Truncate {
        /// Tokens kept.
        max_tokens: usize,
    },
}

/// How tokenize cuts a long document at a limit it may take from the packer after it (see
/// [`Tokenize::long_documents_by_packer`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LongCut {
    /// Into pieces of at most the limit.
    Split,
    /// To its first tokens, up to the limit.
    Truncate,
}

/// A long-document policy still to be settled by the packer after tokenize: the limit
/// (`None`: the packer's row length) and the cut (`None`: split, or truncate where the packer
/// truncates).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct ByPacker {
    max_tokens: Option<usize>,
    cut: Option<LongCut>,
}

/// Tokenizes a text field into a `tokens` field (`Seq` of `u32`), adding BOS/EOS if set.
///
/// Each dataset may name its text field differently ([`Tokenize::dataset_fields`]); the text
/// field is removed (its bytes are no longer needed downstream); other fields stay.
///
/// Long documents: by default, split into pieces of the row length of the packer after it
/// (truncated to it where the packer truncates), kept whole without a packer; the pipeline
/// settles this when it is assembled, so the builder and a spec make the same run.
/// [`Tokenize::long_documents`] sets a policy of its own.
#[derive(Clone, Debug)]
pub struct Tokenize {
    tokenizer: Tokenizer,
    field: Field,
    dataset_fields: Vec<Field>,
    output: Field,
    bos: Option<(String, u32)>,
    eos: Option<(String, u32)>,
    long: LongDocuments,
    /// Set until the packer after it settles `long`.
    by_packer: Option<ByPacker>,
    images: Option<ImagePlaceholders>,
}

impl Tokenize {
    /// Tokenizes field `text` into field `tokens`, no special tokens, long documents cut at
    /// the row length of the packer after it (kept whole without one).
    pub fn new(tokenizer: Tokenizer) -> Self {
        Tokenize {
            tokenizer,
            field: Field::new("text"),
            dataset_fields: Vec::new(),
            output: Field::new("tokens"),
            bos: None,
            eos: None,
            long: LongDocuments::Keep,
            by_packer: Some(ByPacker { max_tokens: None, cut: None }),
            images: None,
        }
    }

    /// Reads the text from field `name` (of datasets without their own, see
    /// [`Tokenize::dataset_fields`]).
    #[must_use]
    pub fn field(mut self, name: &str) -> Self {
        self.field = Field::new(name);
        self
    }

    /// The text field of each dataset, by dataset index (the order of the run's datasets).
    #[must_use]
    pub fn dataset_fields(mut self, names: &[&str]) -> Self {
        self.dataset_fields = names.iter().map(|n| Field::new(n)).collect();
        self
    }

    /// The text field of dataset `dataset`.
    pub fn field_of(&self, dataset: u32) -> &Field {
        self.dataset_fields.get(dataset as usize).unwrap_or(&self.field)
    }

    /// Prepends `token` to every document.
    pub fn bos(mut self, token: &str) -> Result<Self, Error> {
        self.bos = Some((token.to_string(), self.tokenizer.token_id(token)?));
        Ok(self)
    }

    /// Appends `token` to every document.
    pub fn eos(mut self, token: &str) -> Result<Self, Error> {
        self.eos = Some((token.to_string(), self.tokenizer.token_id(token)?));
        Ok(self)
    }

    /// Places the record's images in the token stream (see [`ImagePlaceholders`]).
    #[must_use]
    pub fn images(mut self, images: ImagePlaceholders) -> Self {
        self.images = Some(images);
        self
    }

    /// Sets the long-document policy (whatever the packer after it does).
    pub fn long_documents(mut self, policy: LongDocuments) -> Result<Self, Error> {
        if matches!(policy, LongDocuments::Split { max_tokens: 0 } | LongDocuments::Truncate { max_tokens: 0 }) {
            return Err(Error::Config("max_tokens must be at least 1".into()));
        }
        self.long = policy;
        self.by_packer = None;
        Ok(self)
    }

    /// Cuts long documents at `max_tokens`, or at the row length of the packer after it
    /// (`None`), as `cut` says, or (`None`) split, truncated where the packer truncates. A
    /// split into pieces that each fit a truncating packer's row is refused when the pipeline
    /// is assembled (the packer would cut nothing), as is a `cut` with no limit and no packer.
    pub fn long_documents_by_packer(mut self, cut: Option<LongCut>, max_tokens: Option<usize>) -> Result<Self, Error> {
        if max_tokens == Some(0) {
            return Err(Error::Config("max_tokens must be at least 1".into()));
        }
        self.long = LongDocuments::Keep;
        self.by_packer = Some(ByPacker { max_tokens, cut });
        Ok(self)
    }

    /// This operator with its long-document policy settled by the packer after it:
    /// `packer` is that packer's row length and whether it truncates long documents.
    pub fn settled(&self, packer: Option<(usize, bool)>) -> Result<Tokenize, Error> {
        let Some(ByPacker { max_tokens, cut }) = self.by_packer else { return Ok(self.clone()) };
        let limit = max_tokens.or(packer.map(|(row, _)| row));
        let truncating_packer = packer.filter(|(_, truncates)| *truncates).map(|(row, _)| row);
        let long = match (cut, limit) {
            (None, None) => LongDocuments::Keep,
            (Some(_), None) => {
                return Err(Error::Config(
                    "tokenize cuts long documents at max_tokens or at the row length of a packer after it, and \
                     there is neither"
                        .into(),
                ));
            }
            (None, Some(m)) if truncating_packer.is_some() => LongDocuments::Truncate { max_tokens: m },
            (Some(LongCut::Split), Some(m)) if truncating_packer.is_some_and(|row| m <= row) => {
                return Err(Error::Config(format!(
                    "the packer truncates long documents and would cut nothing: tokenize splits them into pieces of \
                     {m} tokens first, and each fits a row; to keep only the start of long documents, truncate in \
                     tokenize too ([tokenize] long_documents = \"truncate\", LongDocuments::Truncate)"
                )));
            }
            (None | Some(LongCut::Split), Some(m)) => LongDocuments::Split { max_tokens: m },
            (Some(LongCut::Truncate), Some(m)) => LongDocuments::Truncate { max_tokens: m },
        };
        Ok(Tokenize { long, by_packer: None, ..self.clone() })
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The id appended to every document, if any.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos.as_ref().map(|e| e.1)
    }

    /// The most tokens a document keeps, when long documents are truncated.
    pub fn truncates_to(&self) -> Option<usize> {
        match self.long {
            LongDocuments::Truncate { max_tokens } => Some(max_tokens),
            _ => None,
        }
    }

    /// How many tokens every document gets that are not in its text (BOS and EOS).
    pub fn tokens_added(&self) -> usize {
        usize::from(self.bos.is_some()) + usize::from(self.eos.is_some())
    }
}

impl Operator for Tokenize {
    fn name(&self) -> &str {
        "tokenize"
    }

    fn offer(&self) -> Offer {
        Offer::none().with_vocab_size(self.tokenizer.vocab_size())
    }

    /// Reads each dataset's own text field (unless [`Tokenize::dataset_fields`] named them),
    /// and refuses to come before the decoding of images: it places each image by its token
    /// count.
    fn assemble(&self, plan: &Assembly<'_>) -> Result<Option<std::sync::Arc<dyn Operator>>, OpError> {
        if let Some((name, kind)) = plan.after(|o| o.decodes.clone()) {
            return Err(OpError::Fatal(format!(
                "{name} (decoding {kind}) must come before tokenize: tokenize places each image by its token count"
            )));
        }
        let packer = plan.after(|o| o.row_length).map(|(_, row)| (row, plan.after(|o| o.truncates_to).is_some()));
        let settled = self.by_packer.is_some();
        let mut op = self.settled(packer).map_err(|e| OpError::Fatal(e.to_string()))?;
        let fields = self.dataset_fields.is_empty() && !plan.text_fields.is_empty();
        if fields {
            let names: Vec<&str> = plan.text_fields.iter().map(String::as_str).collect();
            op = op.dataset_fields(&names);
        }
        Ok((settled || fields).then(|| std::sync::Arc::new(op) as std::sync::Arc<dyn Operator>))
    }

    fn fingerprint(&self) -> Settings {
        let token = |t: &Option<(String, u32)>| -> SettingsValue {
            t.as_ref().map_or(SettingsValue::None, |(text, id)| SettingsValue::List(vec![text.into(), (*id).into()]))
        };
        let long = match self.long {
            LongDocuments::Keep => SettingsValue::from("keep"),
            LongDocuments::Split { max_tokens } => Settings::new("split", 1).set("max_tokens", max_tokens).into(),
            LongDocuments::Truncate { max_tokens } => Settings::new("truncate", 1).set("max_tokens", max_tokens).into(),
        };
        let images = self.images.as_ref().map(ImagePlaceholders::settings);
        let dataset_fields: Vec<&str> = self.dataset_fields.iter().map(Field::as_str).collect();
        // Unsettled (never part of a run: the pipeline settles it) it says so.
        let long = match self.by_packer {
            Some(b) => Settings::new("by_packer", 1)
                .set("max_tokens", b.max_tokens)
                .set("cut", b.cut.map(|c| if c == LongCut::Split { "split" } else { "truncate" }))
                .into(),
            None => long,
        };
        Settings::new("tokenize", 1)
            .set("tokenizer", self.tokenizer.fingerprint())
            .set("field", self.field.as_str())
            .set("dataset_fields", dataset_fields)
            .set("output", self.output.as_str())
            .set("bos", token(&self.bos))
            .set("eos", token(&self.eos))
            .set("long", long)
            .set("images", images)
    }

    fn describe(&self) -> String {
        let special =
            |s: &Option<(String, u32)>| s.as_ref().map_or("none".to_string(), |(t, id)| format!("{t} ({id})"));
        format!(
            "{} (sha256 {}…, {}), field {} → {:?}, BOS {}, EOS {}, long documents {}",
            self.tokenizer.source(),
            &self.tokenizer.sha256()[..12],
            self.tokenizer.engine(),
            if self.dataset_fields.is_empty() {
                format!("{:?}", self.field.as_str())
            } else {
                format!("{:?} (by dataset)", self.dataset_fields)
            },
            self.output.as_str(),
            special(&self.bos),
            special(&self.eos),
            match self.by_packer {
                Some(b) => format!("{b:?}"),
                None => format!("{:?}", self.long),
            }
        ) + &self.images.as_ref().map(|im| format!(", {}", im.describe())).unwrap_or_default()
            + &self.tokenizer.load_notes().iter().map(|n| format!("; {n}")).collect::<String>()
    }

    fn apply(&self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        self.tokenize(record, None, out)
    }

    /// Restore needs pieces only up to position `until`: with split or truncated documents,
    /// tokenizing stops there (byte-level BPE ids of a prefix do not depend on what follows).
    fn apply_prefix(&self, record: Record, until: u32, out: &mut Vec<Record>) -> Result<(), OpError> {
        let need = match self.long {
            LongDocuments::Split { max_tokens } => (until as usize).div_ceil(max_tokens).saturating_mul(max_tokens),
            LongDocuments::Truncate { max_tokens } => max_tokens,
            LongDocuments::Keep => return self.tokenize(record, None, out),
        };
        self.tokenize(record, Some(need), out)
    }
}

impl Tokenize {
    /// Tokenizes `record`; with `need`, only as far as the first `need` tokens (pieces past
    /// them are not produced, and a document cut short gets no EOS).
    ///
    /// The ids live in one shared buffer: split pieces are views of it, so splitting costs
    /// nothing per piece beyond the piece's record.
    fn tokenize(&self, mut record: Record, need: Option<usize>, out: &mut Vec<Record>) -> Result<(), OpError> {
        let sample = record
            .lineage()
            .as_single()
            .map(|f| f.sample)
            .ok_or_else(|| OpError::Fatal("tokenize expects records read from storage (one sample each)".into()))?;
        let field = self.field_of(sample.dataset);
        let text = match record.take(field.as_str()) {
            Some(Value::Str(t)) => t,
            Some(other) => {
                return Err(OpError::Data(format!("field {:?} is {}, not text", field.as_str(), other.describe())));
            }
            None => return Err(OpError::Data(format!("no field {:?}", field.as_str()))),
        };
        let has_images = match &self.images {
            Some(im) => im.carried_by(&record),
            None => false,
        };
        if record
            .attachments()
            .iter()
            .any(|a| a.span().is_none() && self.images.as_ref().is_none_or(|im| a.kind() != &im.kind))
        {
            return Err(OpError::Fatal(
                "the record carries attachments with no place in the text, and tokenize places none of that kind (set images on tokenize)".into(),
            ));
        }
        let bos = self.bos.as_ref().map(|b| b.1);
        let (mut ids, whole) = match (need, &self.images) {
            (_, Some(im)) if has_images => im
                .place(&self.tokenizer, &text, &mut record, Markers::OrImagesFirst, bos.is_some() as u32, None)
                .map(|ids| (ids, true)),
            (Some(n), _) => {
                self.tokenizer.encode_prefix(&text, n.saturating_sub(bos.is_some() as usize)).map_err(|e| e.to_string())
            }
            (None, _) => self.tokenizer.encode(&text).map(|ids| (ids, true)).map_err(|e| e.to_string()),
        }
        .map_err(|e| OpError::Data(format!("tokenizer failed: {e}")))?;
        drop(text);
        if let Some(b) = bos {
            ids.insert(0, b);
        }
        if whole {
            ids.extend(self.eos.as_ref().map(|e| e.1));
        }
        if ids.is_empty() {
            return Err(OpError::Data("the document has no tokens".into()));
        }
        let n = u32::try_from(ids.len())
            .map_err(|_| OpError::Data(format!("{} tokens is more than a record can address", ids.len())))?;
        record.set_lineage(Lineage::single(Fragment::span(sample, Span::prefix(n))));
        record.set(&self.output, Value::seq(ids));
        let n = n as usize;
        let piece = |r: &Record, start: usize, end: usize| r.slice(start, end);
        match self.long {
            LongDocuments::Split { max_tokens } if n > max_tokens || !whole => {
                let mut start = 0;
                for end in record.piece_ends(max_tokens)? {
                    // A document cut short keeps only whole pieces: the last one may be unfinished.
                    if !whole && end - start < max_tokens {
                        break;
                    }
                    out.push(piece(&record, start, end)?);
                    start = end;
                }
            }
            LongDocuments::Truncate { max_tokens } if n > max_tokens || !whole => {
                let end = record.safe_cut(max_tokens.min(n));
                if end == 0 {
                    return Err(OpError::Data(format!(
                        "an atomic attachment at the start is longer than the {max_tokens} tokens kept"
                    )));
                }
                // Copy the kept prefix so that the rest of a long document's ids is freed now.
                let mut kept = piece(&record, 0, end)?;
                if let Some(ids) = kept.get(self.output.as_str()).and_then(Value::as_array).and_then(|a| a.as_u32()) {
                    let owned = ids.to_vec();
                    kept.set(&self.output, Value::seq(owned));
                }
                out.push(kept);
            }
            _ => out.push(record),
        }
        Ok(())
    }
}
