//! Conversations for fine-tuning: `messages` rendered with the model's chat template,
//! tokenized, with a per-token loss mask on what the assistant says.
//!
//! [`Chat`] is a stateless map (a pure function of one conversation, so it runs on every core
//! and again on restore) followed by a small per-lane accumulator that only counts what the
//! long-conversation policy did, so that the run reports it.

mod messages;
mod spans;
mod template;

use std::ops::Range;
use std::sync::Arc;

use zephon_operator::{
    Accumulator, AccumulatorState, Assembly, Field, Fragment, Holding, LaneContext, Lineage, Offer, OpError, Operator,
    OperatorKind, Record, Settings, Span, Tally, TokenCounter, Value, columns,
};

pub use template::{ChatTemplate, Rendered};

use crate::Tokenizer;
use crate::placeholders::{ImagePlaceholders, Markers};

/// A conversation's token ids, loss mask, and the token where each message starts.
type Encoded = (Vec<u32>, Vec<u8>, Vec<usize>);

/// Which tokens the loss is on (`loss_mask` 1).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum LossOn {
    /// Every assistant turn: what `transformers`' `return_assistant_tokens_mask` marks.
    #[default]
    AssistantTurns,
    /// The last assistant turn only (the others are context).
    LastAssistantTurn,
    /// Every token (continued pre-training on conversations).
    Everything,
}

impl LossOn {
    fn as_str(self) -> &'static str {
        match self {
            LossOn::AssistantTurns => "assistant_turns",
            LossOn::LastAssistantTurn => "last_assistant_turn",
            LossOn::Everything => "everything",
        }
    }
}

/// Which tokens of an assistant message are its turn, under a template without
/// `{% generation %}` blocks (with them, the blocks say).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum AssistantSpan {
    /// What the model is asked to generate: where the template renders each conversation up
    /// to an assistant message as a prefix of the whole, what the message adds after the
    /// conversation before it with the generation prompt (its content, the end-of-turn token,
    /// and what the template writes after it, such as a newline or an empty `<think>` block).
    /// Where it does not (Qwen3, early Llama-3), the content and the end-of-turn token, as
    /// [`AssistantSpan::Content`].
    #[default]
    Generated,
    /// Under every template, the message's content as the template writes it and the special
    /// token right after it (the end-of-turn token): nothing the template adds around them.
    Content,
}

impl AssistantSpan {
    fn as_str(self) -> &'static str {
        match self {
            AssistantSpan::Generated => "generated",
            AssistantSpan::Content => "content",
        }
    }
}

/// What a conversation longer than its limit becomes. Whichever it is, it is counted per
/// dataset and reported (through `Operator::report`, in the run's data report), never
/// applied silently.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LongConversations {
    /// Cut into pieces of at most the limit, each cut at the last turn boundary that fits (or
    /// at the limit inside a turn longer than it); each piece is a record of its own.
    SplitAtTurns,
    /// Keep the first tokens up to the limit.
    Truncate,
    /// Leave the conversation out.
    Skip,
}

impl LongConversations {
    fn as_str(self) -> &'static str {
        match self {
            LongConversations::SplitAtTurns => "split_at_turns",
            LongConversations::Truncate => "truncate",
            LongConversations::Skip => "skip",
        }
    }
}

/// Renders each record's conversation with a chat template, tokenizes it and writes `tokens`
/// (`Seq` of `u32`) and `loss_mask` (`Seq` of `u8`, aligned with the tokens, 1 on tokens the
/// loss is on; a packer turns it into the row's loss mask and labels).
///
/// - The conversation is a JSON array of messages (`{"role", "content"}`, as OpenAI and
///   Hugging Face datasets store them) in the field `messages` (read as JSON text: a
///   dataset's `json_fields`). Roles must be `system`, `user`, `assistant` or `tool` (or those
///   given to [`Chat::roles`]); every message needs a `content` (text, or a list of parts).
///   Anything else is a bad record naming the message.
/// - The text is rendered as `transformers`' `apply_chat_template` renders it (see
///   [`ChatTemplate`]), then tokenized with special tokens in the text read as control tokens
///   (the template writes them) and no others added.
/// - The assistant's tokens: with `{% generation %}` blocks in the template, the tokens those
///   blocks produced (exactly `return_assistant_tokens_mask`); without, each assistant
///   message's span as [`AssistantSpan`] says: what rendering it adds after the conversation
///   before it with the generation prompt, where the template renders each conversation as a
///   prefix of the next, else its content and end-of-turn token, found by rendering the
///   conversation again with that content replaced by a marker. A token is marked when its
///   bytes overlap such a span.
/// - A template error is a bad record, with the template's own message.
/// - Images (vision-language chat, with [`Chat::images`]): the record's images, decoded by the
///   image operator before this one, are placed where the template writes their markers (a
///   message part `{"type": "image"}` becomes, say, `<|vision_start|><|image_pad|><|vision_end|>`),
///   one marker per image in order, as [`ImagePlaceholders`] says; placeholder tokens are never
///   on the loss.
#[derive(Clone, Debug)]
pub struct Chat {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    field: Field,
    loss: LossOn,
    span: AssistantSpan,
    /// The tokenizer's special tokens, longest first: the end-of-turn token a content span
    /// extends over is one of them.
    end_tokens: Arc<[String]>,
    long: Option<(LongConversations, usize)>,
    roles: Arc<[String]>,
    images: Option<ImagePlaceholders>,
    /// Take the limit from the packer after it (its row length), when no limit was given.
    limit_from_packer: Option<LongConversations>,
}

impl Chat {
    /// Conversations rendered with `template` and tokenized with `tokenizer`, the loss on every
    /// assistant turn, no length limit (a packer after it cuts long ones like documents).
    pub fn new(tokenizer: Tokenizer, template: ChatTemplate) -> Self {
        let mut end_tokens: Vec<String> = tokenizer
            .inner()
            .get_added_tokens_decoder()
            .into_values()
            .filter(|t| t.special && !t.content.is_empty())
            .map(|t| t.content)
            .collect();
        end_tokens.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        Chat {
            span: AssistantSpan::default(),
            end_tokens: end_tokens.into(),
            tokenizer: tokenizer.allow_special_tokens_in_text(true),
            template,
            field: Field::new("messages"),
            loss: LossOn::default(),
            long: None,
            roles: ["system", "user", "assistant", "tool"].iter().map(|r| r.to_string()).collect(),
            images: None,
            limit_from_packer: None,
        }
    }

    /// The field holding the conversation (default `messages`).
    #[must_use]
    pub fn field(mut self, field: &str) -> Self {
        self.field = Field::new(field);
        self
    }

    /// Which tokens the loss is on.
    #[must_use]
    pub fn loss_on(mut self, loss: LossOn) -> Self {
        self.loss = loss;
        self
    }

    /// Which tokens of an assistant message are its turn (see [`AssistantSpan`]); refused
    /// with a template whose `{% generation %}` blocks say it.
    pub fn assistant_span(mut self, span: AssistantSpan) -> Result<Self, crate::Error> {
        if span != AssistantSpan::Generated && self.template.has_generation_blocks() {
            return Err(crate::Error::Config(format!(
                "chat: assistant_span = {:?} is for templates without {{% generation %}} blocks, and {} has them \
                 (they say which tokens are the assistant's)",
                span.as_str(),
                self.template.origin()
            )));
        }
        self.span = span;
        Ok(self)
    }

    /// Conversations longer than `max_tokens` become what `policy` says (counted and
    /// reported).
    pub fn long_conversations(mut self, policy: LongConversations, max_tokens: usize) -> Result<Self, crate::Error> {
        if max_tokens == 0 {
            return Err(crate::Error::Config("chat: the length limit must be at least 1 token".into()));
        }
        self.long = Some((policy, max_tokens));
        self.limit_from_packer = None;
        Ok(self)
    }

    /// As [`Chat::long_conversations`], at the row length of the packer after it (set when
    /// the pipeline is assembled; without a packer the pipeline is refused).
    #[must_use]
    pub fn long_conversations_at_row_length(mut self, policy: LongConversations) -> Self {
        self.limit_from_packer = Some(policy);
        self.long = None;
        self
    }

    /// The roles a message may have.
    #[must_use]
    pub fn roles(mut self, roles: &[&str]) -> Self {
        self.roles = roles.iter().map(|r| r.to_string()).collect();
        self
    }

    /// Places the record's images where the template writes their markers (see
    /// [`ImagePlaceholders`]; every marker needs an image and every image a marker).
    #[must_use]
    pub fn images(mut self, images: ImagePlaceholders) -> Self {
        self.images = Some(images);
        self
    }

    /// The template.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// The conversation of `messages` (JSON text) as token ids and their loss mask (images,
    /// which a record carries, are not placed: their markers stay text).
    pub fn encode(&self, messages: &str) -> Result<(Vec<u32>, Vec<u8>), String> {
        let (ids, mask, _) = self.encode_with_turns(messages, false, None)?;
        Ok((ids, mask))
    }

    /// Ids, mask and (with `turns`) the token index where each message's rendering starts;
    /// with `record`, its images placed (see [`Chat::images`]).
    fn encode_with_turns(&self, messages: &str, turns: bool, record: Option<&mut Record>) -> Result<Encoded, String> {
        let parsed = messages::parse(messages, &self.roles)?;
        let rendered = self.template.render_text(&parsed.value, false)?;
        let spans = match self.loss {
            LossOn::Everything => std::iter::once(0..rendered.text.len()).collect(),
            _ if self.template.has_generation_blocks() => rendered.generation.clone(),
            _ => self.assistant_spans(&parsed, &rendered.text)?,
        };
        let spans = match self.loss {
            LossOn::LastAssistantTurn => spans.last().cloned().into_iter().collect(),
            _ => spans,
        };
        let mut record = record.filter(|_| self.images.is_some());
        let (ids, offsets) = match (&self.images, record.as_deref_mut()) {
            (Some(im), Some(record)) => {
                let mut offsets = Vec::new();
                let ids =
                    im.place(&self.tokenizer, &rendered.text, record, Markers::Required, 0, Some(&mut offsets))?;
                (ids, offsets)
            }
            _ => self.tokenizer.encode_with_offsets(&rendered.text).map_err(|e| e.to_string())?,
        };
        let mut mask: Vec<u8> =
            offsets.iter().map(|t| u8::from(spans.iter().any(|s| t.end > s.start && t.start < s.end))).collect();
        // A placeholder is never a target, even inside an assistant's message.
        for span in record.iter().flat_map(|r| r.attachments()).filter_map(|a| a.span()) {
            mask.get_mut(span.start() as usize..span.end() as usize).into_iter().flatten().for_each(|m| *m = 0);
        }
        let starts = if turns { self.turn_starts(&parsed, &rendered.text, &offsets) } else { Vec::new() };
        Ok((ids, mask, starts))
    }

    /// Each assistant message's span in `full`, as [`AssistantSpan`] says.
    fn assistant_spans(&self, parsed: &messages::Parsed, full: &str) -> Result<Vec<Range<usize>>, String> {
        if self.span == AssistantSpan::Generated
            && let Some(spans) = spans::generated(&self.template, parsed, full)?
        {
            return Ok(spans);
        }
        spans::content(&self.template, parsed, full, &self.end_tokens)
    }

    /// The token index where each message's rendering starts (turn boundaries), where the
    /// template renders each conversation as a prefix of the next; empty where it does not.
    fn turn_starts(&self, parsed: &messages::Parsed, full: &str, offsets: &[Range<usize>]) -> Vec<usize> {
        let mut starts = Vec::with_capacity(parsed.len());
        for i in 1..parsed.len() {
            let Ok(before) = self.template.render_text(&parsed.prefix(i), false) else { return Vec::new() };
            if !full.starts_with(&before.text) {
                return Vec::new();
            }
            starts.push(offsets.partition_point(|t| t.end <= before.text.len()));
        }
        starts
    }

    fn limit(&self) -> Option<(LongConversations, usize)> {
        self.long
    }
}

/// Marks what the long-conversation policy did to a record, for the counting accumulator:
/// `1` split (on the first piece), `2` truncated, `3` skipped (a record with no tokens, which
/// the accumulator drops).
const CUT: &str = "chat.cut";
/// Tokens a truncation left out.
const LOST: &str = "chat.lost";
const SPLIT: i64 = 1;
const TRUNCATED: i64 = 2;
const SKIPPED: i64 = 3;

impl Operator for Chat {
    fn name(&self) -> &str {
        "chat"
    }

    fn kind(&self) -> OperatorKind {
        OperatorKind::MapThenAccumulate
    }

    /// Its vocabulary, its truncation, and (without images, whose placeholder counts are
    /// known only once decoded) a count of the tokens it delivers for a conversation.
    fn offer(&self) -> Offer {
        // Its accumulator only counts: every record passes on as it comes.
        let mut offer = Offer::none().with_vocab_size(self.tokenizer.vocab_size()).with_holding(Holding::Nothing);
        if let Some((LongConversations::Truncate, n)) = self.long {
            offer = offer.with_truncation(n as u64);
        }
        if self.images.is_none() {
            let chat = self.clone();
            offer = offer.with_token_counter(TokenCounter::new(
                self.field.as_str(),
                self.fingerprint().digest(),
                move |messages| {
                    let Ok((ids, _)) = chat.encode(messages) else { return 0 };
                    match chat.long {
                        Some((LongConversations::Truncate, n)) => ids.len().min(n),
                        Some((LongConversations::Skip, n)) if ids.len() > n => 0,
                        _ => ids.len(),
                    }
                },
            ));
        }
        offer
    }

    /// Takes its length limit from the packer after it, when asked to, and refuses to come
    /// before the decoding of images: it places each image by its token count.
    fn assemble(&self, plan: &Assembly<'_>) -> Result<Option<Arc<dyn Operator>>, OpError> {
        if let Some((name, kind)) = plan.after(|o| o.decodes.clone()) {
            return Err(OpError::Fatal(format!(
                "{name} (decoding {kind}) must come before chat: chat places each image by its token count"
            )));
        }
        let Some(policy) = self.limit_from_packer else { return Ok(None) };
        let Some((_, n)) = plan.after(|o| o.row_length) else {
            return Err(OpError::Fatal(
                "chat: long conversations are cut at the row length of a packer after it, and there is none".into(),
            ));
        };
        let chat = self.clone().long_conversations(policy, n).map_err(|e| OpError::Fatal(e.to_string()))?;
        Ok(Some(Arc::new(chat)))
    }

    fn fingerprint(&self) -> Settings {
        let globals: Vec<(String, String)> =
            self.template.globals().iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
        let globals: Vec<Settings> =
            globals.iter().map(|(k, v)| Settings::new("variable", 1).set("name", k).set("json", v)).collect();
        let long = self
            .long
            .map(|(p, n)| Settings::new("long_conversations", 1).set("policy", p.as_str()).set("max_tokens", n));
        Settings::new("chat", 2)
            .set("tokenizer", self.tokenizer.fingerprint())
            .set("template", self.template.sha256())
            .set("variables", globals)
            .set("field", self.field.as_str())
            .set("loss_on", self.loss.as_str())
            .set("assistant_span", self.span.as_str())
            .set("long", long)
            .set("roles", self.roles.to_vec())
            .set("images", self.images.as_ref().map(ImagePlaceholders::settings))
    }

    fn describe(&self) -> String {
        format!(
            "{} (sha256 {}…) rendering {:?} with {} (sha256 {}…, {}), loss on {}, long conversations: {}{}",
            self.tokenizer.source(),
            &self.tokenizer.sha256()[..12],
            self.field.as_str(),
            self.template.origin(),
            &self.template.sha256()[..12],
            match (self.template.has_generation_blocks(), self.span) {
                (true, _) => "assistant tokens from its {% generation %} blocks",
                (false, AssistantSpan::Generated) => {
                    "assistant tokens: what each turn adds after the one before, else its content and end-of-turn token"
                }
                (false, AssistantSpan::Content) => "assistant tokens: each turn's content and end-of-turn token",
            },
            self.loss.as_str(),
            match (self.long, self.limit_from_packer) {
                (Some((p, n)), _) => format!("{} at {n} tokens", p.as_str()),
                (None, Some(p)) => format!("{} at the row length", p.as_str()),
                (None, None) => "kept whole (a packer cuts them like documents)".into(),
            },
            self.images.as_ref().map(|im| format!(", {}", im.describe())).unwrap_or_default()
        )
    }

    fn apply(&self, mut record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        let sample = record
            .lineage()
            .as_single()
            .map(|f| f.sample)
            .ok_or_else(|| OpError::Fatal("chat expects records read from storage (one sample each)".into()))?;
        let text = match record.take(self.field.as_str()) {
            Some(Value::Str(t)) => t,
            Some(other) => {
                return Err(OpError::Data(format!(
                    "field {:?} is {}, not a conversation (read it as JSON: json_fields)",
                    self.field.as_str(),
                    other.describe()
                )));
            }
            None => return Err(OpError::Data(format!("no field {:?}", self.field.as_str()))),
        };
        if record
            .attachments()
            .iter()
            .any(|a| a.span().is_none() && self.images.as_ref().is_none_or(|im| a.kind() != &im.kind))
        {
            return Err(OpError::Fatal(
                "the record carries attachments with no place in the conversation, and chat places none of that kind \
                 (set images on chat)"
                    .into(),
            ));
        }
        let split = matches!(self.limit(), Some((LongConversations::SplitAtTurns, _)));
        let (ids, mask, turns) = self.encode_with_turns(&text, split, Some(&mut record)).map_err(OpError::Data)?;
        drop(text);
        if ids.is_empty() {
            return Err(OpError::Data("the conversation renders to no tokens".into()));
        }
        let n = u32::try_from(ids.len())
            .map_err(|_| OpError::Data(format!("{} tokens is more than a record can address", ids.len())))?;
        record.set_lineage(Lineage::single(Fragment::span(sample, Span::prefix(n))));
        record.set(&Field::new(columns::TOKENS), Value::seq(ids));
        record.set(&Field::new(columns::LOSS_MASK), Value::seq(mask));
        let Some((policy, max)) = self.limit().filter(|(_, max)| n as usize > *max) else {
            out.push(record);
            return Ok(());
        };
        match policy {
            LongConversations::Truncate => {
                let max = record.safe_cut(max);
                if max == 0 {
                    return Err(OpError::Data(
                        "the conversation starts with an image longer than the length limit".into(),
                    ));
                }
                let kept = record.slice(0, max)?;
                out.push(
                    kept.with(&Field::new(CUT), Value::Int(TRUNCATED))
                        .with(&Field::new(LOST), Value::Int(i64::from(n) - max as i64)),
                );
            }
            LongConversations::Skip => {
                let none = record.slice(0, 0)?;
                out.push(none.with(&Field::new(CUT), Value::Int(SKIPPED)));
            }
            LongConversations::SplitAtTurns => {
                let mut at = 0;
                while at < n as usize {
                    let limit = (at + max).min(n as usize);
                    let end = turns
                        .iter()
                        .copied()
                        .filter(|&t| t > at && t <= limit)
                        .max()
                        .filter(|_| limit < n as usize)
                        .unwrap_or_else(|| record.safe_cut(limit));
                    if end <= at {
                        return Err(OpError::Data(format!(
                            "an image at token {at} is longer than the length limit of {max} tokens"
                        )));
                    }
                    let mut piece = record.slice(at, end)?;
                    if at == 0 {
                        piece = piece.with(&Field::new(CUT), Value::Int(SPLIT));
                    }
                    out.push(piece);
                    at = end;
                }
            }
        }
        Ok(())
    }

    fn accumulator(&self, _: LaneContext) -> Option<Box<dyn Accumulator>> {
        Some(Box::new(Counts::default()))
    }

    /// What the long-conversation policy did, per dataset.
    fn report(&self, state: &AccumulatorState, datasets: usize) -> Vec<Tally> {
        let counts = chat_counts(state, datasets);
        let per = |name, f: fn(&(u64, u64, u64, u64)) -> u64| Tally::PerDataset {
            name,
            values: counts.iter().map(f).collect(),
        };
        vec![
            per("conversations_split", |c| c.0),
            per("conversations_truncated", |c| c.1),
            per("truncated_tokens", |c| c.2),
            per("conversations_skipped", |c| c.3),
        ]
    }
}

/// Per dataset: conversations split, truncated, tokens truncation left out, conversations
/// skipped.
const COUNTERS: usize = 4;

/// Counts what the long-conversation policy did, per dataset, and passes records on.
#[derive(Debug, Default)]
struct Counts {
    values: Vec<u64>,
}

impl Accumulator for Counts {
    fn push(&mut self, mut record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        let cut = match record.take(CUT) {
            Some(Value::Int(c)) => c,
            _ => {
                out.push(record);
                return Ok(());
            }
        };
        let lost = match record.take(LOST) {
            Some(Value::Int(n)) => n.max(0) as u64,
            _ => 0,
        };
        let d = record.lineage().first_sample().map_or(0, |s| s.dataset as usize);
        if self.values.len() < COUNTERS * (d + 1) {
            self.values.resize(COUNTERS * (d + 1), 0);
        }
        let at = COUNTERS * d;
        match cut {
            SPLIT => self.values[at] += 1,
            TRUNCATED => {
                self.values[at + 1] += 1;
                self.values[at + 2] += lost;
            }
            _ => {
                self.values[at + 3] += 1;
                return Ok(());
            }
        }
        out.push(record);
        Ok(())
    }

    fn export(&self) -> AccumulatorState {
        AccumulatorState { values: self.values.clone(), buffered: Vec::new() }
    }

    fn import(&mut self, state: AccumulatorState, buffered: Vec<Record>) -> Result<(), OpError> {
        if !state.values.len().is_multiple_of(COUNTERS) || !buffered.is_empty() {
            return Err(OpError::Fatal(format!(
                "a chat state holds {} numbers and {} records: it counts, four numbers a dataset, and holds nothing",
                state.values.len(),
                buffered.len()
            )));
        }
        self.values = state.values;
        Ok(())
    }
}

/// What the long-conversation policy did on one lane, per dataset, from the chat stage's
/// exported state (for reports): `(conversations split, truncated, tokens truncated, skipped)`.
fn chat_counts(state: &AccumulatorState, datasets: usize) -> Vec<(u64, u64, u64, u64)> {
    (0..datasets)
        .map(|d| {
            let v = |i: usize| state.values.get(COUNTERS * d + i).copied().unwrap_or(0);
            (v(0), v(1), v(2), v(3))
        })
        .collect()
}
