//! The output side: a row under construction, and the one function that lays a row out.
//!
//! [`assemble`] is the only place a row record is made. `push`, `finish` and `rebuild` all call
//! it with the row's fragments and their tokens, so a rebuilt row is byte-identical to the
//! row first emitted by construction, not by a second implementation agreeing with the first.

use zephon_operator::{Attachment, Buffer, Field, Fragment, Lineage, OpError, RebuildInput, Record, Value};

use crate::config::PackOptions;
use crate::doc::{Piece, read_piece};
use crate::error::PackError;

pub use zephon_operator::columns::{
    CU_SEQLENS, INPUT_IDS, LABELS, LOSS_MASK, LOSS_WEIGHTS, MAX_SEQLEN, NUM_TOKENS, POSITIONS, SEGMENT, SEGMENT_IDS,
    SOURCE_IDS,
};

/// A row being filled: its segments' fragments, their tokens concatenated, and their
/// attachments moved to row positions.
///
/// Invariant while open (checked by `import`): fewer than T tokens and fewer than S segments,
/// because a row that reaches either is emitted at once.
#[derive(Clone, Debug)]
pub(crate) struct OpenRow {
    fragments: Vec<Fragment>,
    tokens: Vec<u32>,
    /// The pieces' loss masks, from the first piece that has one (pieces before it, and any
    /// without, are all 1).
    mask: Option<Vec<u8>>,
    attachments: Vec<Attachment>,
    /// Each segment's weight on the loss.
    weights: Vec<f32>,
    /// T: the token buffer never grows past it (a row never holds more).
    limit: usize,
}

impl OpenRow {
    /// An empty row whose token buffer already has room for T tokens (it becomes `input_ids`):
    /// for rows that fill up (wrap's one row, a piece that is a row by itself).
    pub fn new(config: &PackOptions) -> Self {
        OpenRow {
            fragments: Vec::new(),
            tokens: Vec::with_capacity(config.seq_len),
            mask: None,
            attachments: Vec::new(),
            weights: Vec::new(),
            limit: config.seq_len,
        }
    }

    /// An empty row whose token buffer grows with what it holds: for the fit algorithms'
    /// open rows, of which a lane may hold many, most of them far from full. Reserving T for
    /// each would make 1,024 lanes of 64 open rows hold ~4 KiB per open row however little is
    /// in it.
    pub fn growing(config: &PackOptions) -> Self {
        OpenRow {
            fragments: Vec::new(),
            tokens: Vec::new(),
            mask: None,
            attachments: Vec::new(),
            weights: Vec::new(),
            limit: config.seq_len,
        }
    }

    /// Tokens so far.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Segments so far.
    pub fn segments(&self) -> usize {
        self.fragments.len()
    }

    /// Whether the row holds nothing yet.
    pub fn is_empty(&self) -> bool {
        self.fragments.is_empty()
    }

    /// Tokens that still fit.
    pub fn room(&self, config: &PackOptions) -> usize {
        config.seq_len.saturating_sub(self.len())
    }

    /// Whether the row must be emitted now: full, or at the segment cap.
    pub fn is_complete(&self, config: &PackOptions) -> bool {
        self.len() >= config.seq_len || self.segments() >= config.max_segments
    }

    /// Appends one piece as a new segment: its tokens are copied into the row, its attachments
    /// move to row positions and learn their segment. The caller keeps it within room.
    pub fn push(&mut self, piece: Piece) -> Result<(), PackError> {
        let offset = self.tokens.len() as i64;
        let segment = Value::Int(self.fragments.len() as i64 + 1);
        self.fragments.push(piece.fragment);
        self.weights.push(piece.weight);
        let need = self.tokens.len() + piece.tokens.len();
        if need > self.tokens.capacity() {
            // Doubling, but never past T: a row begun with 700 tokens would otherwise keep room
            // for 1,400 in a row of 1,024, for as long as the row lives (open, then emitted).
            let room = (2 * self.tokens.capacity()).max(need).min(self.limit.max(need));
            self.tokens.reserve_exact(room - self.tokens.len());
        }
        match (&mut self.mask, &piece.mask) {
            (Some(m), Some(p)) => m.extend_from_slice(p),
            (Some(m), None) => m.resize(need, 1),
            (None, Some(p)) => {
                let mut m = vec![1u8; self.tokens.len()];
                m.extend_from_slice(p);
                self.mask = Some(m);
            }
            (None, None) => {}
        }
        self.tokens.extend_from_slice(&piece.tokens);
        for a in piece.attachments {
            let span = a.span().and_then(|s| s.shifted(offset)).ok_or_else(|| {
                PackError::State(format!("{} #{} of {} has no row position", a.kind(), a.item(), piece.fragment))
            })?;
            let atomic = a.is_atomic();
            self.attachments.push(a.placed(span, atomic).with(&Field::new(SEGMENT), segment.clone()));
        }
        Ok(())
    }

    /// The lineage of each held piece, in order (what `export` saves).
    pub fn lineages(&self) -> impl ExactSizeIterator<Item = Lineage> + '_ {
        self.fragments.iter().map(|f| Lineage::single(*f))
    }

    /// The pieces the row holds, in order, as they were before they entered it: tokens (views
    /// of the row's buffer), fragment, and attachments back at piece positions.
    pub fn into_pieces(self) -> Result<Vec<Piece>, PackError> {
        let tokens = Buffer::new(self.tokens);
        let mask = self.mask.map(Buffer::new);
        let segment = Field::new(SEGMENT);
        let mut attachments = self.attachments.into_iter().peekable();
        let mut pieces = Vec::with_capacity(self.fragments.len());
        let mut at = 0usize;
        for (i, fragment) in self.fragments.into_iter().enumerate() {
            let n = fragment.len() as usize;
            let lost = || PackError::State(format!("{fragment} does not match the row's tokens"));
            let piece_tokens = tokens.slice(at..at + n).ok_or_else(lost)?;
            let mut own = Vec::new();
            while let Some(a) = attachments.next_if(|a| a.get(SEGMENT) == Some(&Value::Int(i as i64 + 1))) {
                let mut a = a;
                a.take(segment.as_str());
                let span = a.span().and_then(|s| s.shifted(-(at as i64))).ok_or_else(lost)?;
                let atomic = a.is_atomic();
                own.push(a.placed(span, atomic));
            }
            let piece_mask = match &mask {
                Some(m) => Some(m.slice(at..at + n).ok_or_else(lost)?),
                None => None,
            };
            let weight = self.weights.get(i).copied().unwrap_or(1.0);
            pieces.push(Piece { fragment, tokens: piece_tokens, mask: piece_mask, attachments: own, weight });
            at += n;
        }
        Ok(pieces)
    }

    /// Lays out the row (its token buffer becomes `input_ids`).
    pub fn into_record(self, config: &PackOptions) -> Result<Record, PackError> {
        assemble(config, &self.fragments, self.tokens, self.mask, &self.weights, self.attachments)
    }

    /// Appends a piece read back from a checkpoint or a rebuild, checking that it is exactly
    /// the piece asked for.
    pub fn push_restored(&mut self, wanted: Fragment, record: Record, config: &PackOptions) -> Result<(), PackError> {
        match read_piece(record, config)? {
            Some(piece) if piece.fragment == wanted => self.push(piece),
            Some(piece) => Err(PackError::State(format!("asked for {wanted}, got {}", piece.fragment))),
            None => Err(PackError::State(format!("{wanted} is empty: a packed piece never is"))),
        }
    }
}

/// Rebuilds the row with `lineage` from exactly its pieces, through [`assemble`].
pub(crate) fn rebuild(
    config: &PackOptions,
    lineage: &Lineage,
    input: &mut dyn RebuildInput,
) -> Result<Record, OpError> {
    let fragments = lineage.fragments();
    if fragments.is_empty() || fragments.len() > config.max_segments {
        // Refused before reading anything back; `assemble` would refuse it too.
        let s = config.max_segments;
        return Err(PackError::State(format!("a row has 1 to {s} segments, not {}", fragments.len())).into());
    }
    let mut row = OpenRow::new(config);
    for &f in fragments {
        let piece = input.exact(&Lineage::single(f))?;
        row.push_restored(f, piece, config)?;
    }
    Ok(row.into_record(config)?)
}

/// The row made of `fragments`, whose tokens are `tokens` in order and whose attachments sit at
/// row positions. Fails, rather than panicking, on a shape this packer never produces (a
/// lineage from a foreign checkpoint).
///
/// A position whose next token lies inside an attachment's span (an image placeholder) gets
/// no label: the model is not trained to predict placeholders. With a per-token loss `mask`
/// (a chat conversation's), a position is trained on only when its next token, the label,
/// is marked; with [`PackOptions::mask_labels`] the others' labels are `ignore_index` too.
/// `source_ids` and `loss_weights`, when the settings ask for them, follow `loss_mask`: each
/// position's dataset, and `loss_mask` times its segment's weight (`weights`, one a segment).
pub(crate) fn assemble(
    config: &PackOptions,
    fragments: &[Fragment],
    tokens: Vec<u32>,
    mask: Option<Vec<u8>>,
    weights: &[f32],
    attachments: Vec<Attachment>,
) -> Result<Record, PackError> {
    let (t, s) = (config.seq_len, config.max_segments);
    if fragments.is_empty() || fragments.len() > s {
        return Err(PackError::State(format!("a row has 1 to {s} segments, not {}", fragments.len())));
    }
    let mut lens = Vec::with_capacity(fragments.len());
    for f in fragments {
        match f.positions() {
            Some(p) if !p.is_empty() => lens.push(p.len() as usize),
            _ => return Err(PackError::State(format!("a row segment is a non-empty token range, not {f}"))),
        }
    }
    let total: usize = lens.iter().sum();
    if mask.as_ref().is_some_and(|m| m.len() != tokens.len()) {
        return Err(PackError::State(format!(
            "a loss mask of {} for {} tokens",
            mask.map_or(0, |m| m.len()),
            tokens.len()
        )));
    }
    if total != tokens.len() || total > t {
        let n = tokens.len();
        return Err(PackError::State(format!("segments of {total} positions with {n} tokens do not fit a row of {t}")));
    }
    let mut placeholder = vec![false; if attachments.is_empty() { 0 } else { t }];
    for a in &attachments {
        match a.span() {
            Some(sp) if sp.end() as usize <= total => {
                placeholder[sp.start() as usize..sp.end() as usize].iter_mut().for_each(|p| *p = true)
            }
            _ => return Err(PackError::State(format!("{} #{} lies outside the row's tokens", a.kind(), a.item()))),
        }
    }

    let mut input_ids = tokens;
    // Exactly T: a buffer that grew by doubling would otherwise keep up to 2T in every row.
    input_ids.reserve_exact(t - input_ids.len());
    input_ids.resize(t, config.pad_id);
    let mut labels = vec![config.ignore_index; t];
    let mut positions = vec![0i32; t];
    let mut segment_ids = vec![0i32; t];
    let mut loss_mask = vec![0u8; t];
    let mut cu_seqlens = Vec::with_capacity(s + 2);
    cu_seqlens.push(0i32);
    let mut max_seqlen = 0;
    let mut at = 0;
    // Every index below is < total ≤ T ≤ i32::MAX (checked by the config), so the casts are exact.
    for (seg, &len) in lens.iter().enumerate() {
        for p in 0..len {
            let i = at + p;
            positions[i] = p as i32;
            segment_ids[i] = seg as i32 + 1;
            if p + 1 < len && !placeholder.get(i + 1).copied().unwrap_or(false) {
                let trained = mask.as_ref().is_none_or(|m| m[i + 1] == 1);
                if trained || !config.mask_labels {
                    labels[i] = input_ids[i + 1] as i32;
                }
                loss_mask[i] = u8::from(trained);
            }
        }
        at += len;
        cu_seqlens.push(at as i32);
        max_seqlen = max_seqlen.max(len);
    }
    if at < t {
        cu_seqlens.push(t as i32);
        max_seqlen = max_seqlen.max(t - at);
    }
    cu_seqlens.resize(s + 2, t as i32);

    let loss_weights = config.loss_weights.is_some().then(|| {
        let mut w = vec![0f32; t];
        let mut at = 0;
        for (seg, &len) in lens.iter().enumerate() {
            let weight = weights.get(seg).copied().unwrap_or(1.0);
            for i in at..at + len {
                w[i] = f32::from(loss_mask[i]) * weight;
            }
            at += len;
        }
        w
    });
    let mut record = Record::new(Lineage::from_fragments(fragments.to_vec()))
        .with(&Field::new(INPUT_IDS), Value::array(input_ids))
        .with(&Field::new(LABELS), Value::array(labels))
        .with(&Field::new(POSITIONS), Value::array(positions))
        .with(&Field::new(SEGMENT_IDS), Value::array(segment_ids))
        .with(&Field::new(CU_SEQLENS), Value::array(cu_seqlens))
        .with(&Field::new(MAX_SEQLEN), Value::Int(max_seqlen as i64))
        .with(&Field::new(LOSS_MASK), Value::array(loss_mask))
        .with(&Field::new(NUM_TOKENS), Value::Int(total as i64));
    if config.source_ids {
        let mut source_ids = vec![u16::MAX; t];
        let mut at = 0;
        for (f, &len) in fragments.iter().zip(&lens) {
            // `read_piece` refused datasets past u16.
            let d = u16::try_from(f.sample.dataset).map_err(|_| PackError::TooManySources(f.sample.dataset))?;
            source_ids[at..at + len].fill(d);
            at += len;
        }
        record = record.with(&Field::new(SOURCE_IDS), Value::array(source_ids));
    }
    if let Some(loss_weights) = loss_weights {
        record = record.with(&Field::new(LOSS_WEIGHTS), Value::array(loss_weights));
    }
    for a in attachments {
        record.attach(a);
    }
    Ok(record)
}

/// A row of padding only (no segment): what fills a step a lane has no data for, so that
/// every rank's steps keep their shape. Nothing in it is trained on (`loss_mask` 0, labels
/// `ignore_index`) and its lineage is empty.
pub(crate) fn padding(config: &PackOptions) -> Record {
    let t = config.seq_len;
    let mut cu_seqlens = vec![0i32];
    cu_seqlens.resize(config.max_segments + 2, t as i32);
    let mut record = Record::new(Lineage::default())
        .with(&Field::new(INPUT_IDS), Value::array(vec![config.pad_id; t]))
        .with(&Field::new(LABELS), Value::array(vec![config.ignore_index; t]))
        .with(&Field::new(POSITIONS), Value::array(vec![0i32; t]))
        .with(&Field::new(SEGMENT_IDS), Value::array(vec![0i32; t]))
        .with(&Field::new(CU_SEQLENS), Value::array(cu_seqlens))
        .with(&Field::new(MAX_SEQLEN), Value::Int(t as i64))
        .with(&Field::new(LOSS_MASK), Value::array(vec![0u8; t]))
        .with(&Field::new(NUM_TOKENS), Value::Int(0));
    if config.source_ids {
        record = record.with(&Field::new(SOURCE_IDS), Value::array(vec![u16::MAX; t]));
    }
    if config.loss_weights.is_some() {
        record = record.with(&Field::new(LOSS_WEIGHTS), Value::array(vec![0f32; t]));
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Algorithm;
    use zephon_operator::SampleId;

    fn frag(row: u64, start: u32, end: u32) -> Fragment {
        Fragment::range(SampleId::new(0, 0, row), start, end).unwrap()
    }

    fn get<'a>(r: &'a Record, name: &str) -> &'a Value {
        r.get(name).unwrap()
    }

    #[test]
    fn a_loss_mask_trains_only_on_marked_labels() {
        let mut config = PackOptions::new(Algorithm::Wrap, 6);
        config.max_segments = 2;
        // Two segments: 3 tokens masked 0,1,1 and 2 tokens without a mask (all trained).
        let mask = Some(vec![0, 1, 1, 1, 1]);
        let r =
            assemble(&config, &[frag(1, 0, 3), frag(2, 0, 2)], vec![10, 11, 12, 20, 21], mask.clone(), &[], Vec::new())
                .unwrap();
        assert_eq!(r.get(LOSS_MASK), Some(&Value::array::<u8>(vec![1, 1, 0, 1, 0, 0])));
        assert_eq!(r.get(LABELS), Some(&Value::array::<i32>(vec![11, 12, -100, 21, -100, -100])));
        let masked = PackOptions { mask_labels: true, ..config.clone() };
        let m0 = Some(vec![1, 0, 1, 1, 1]);
        let r =
            assemble(&masked, &[frag(1, 0, 3), frag(2, 0, 2)], vec![10, 11, 12, 20, 21], m0, &[], Vec::new()).unwrap();
        assert_eq!(r.get(LOSS_MASK), Some(&Value::array::<u8>(vec![0, 1, 0, 1, 0, 0])));
        assert_eq!(r.get(LABELS), Some(&Value::array::<i32>(vec![-100, 12, -100, 21, -100, -100])));
        assert!(assemble(&config, &[frag(1, 0, 2)], vec![1, 2], Some(vec![1]), &[], Vec::new()).is_err());
    }

    #[test]
    fn lays_out_two_segments_and_padding() {
        let config = PackOptions { pad_id: 9, max_segments: 3, ..PackOptions::new(Algorithm::Wrap, 8) };
        let r = assemble(&config, &[frag(1, 0, 3), frag(2, 5, 7)], vec![10, 11, 12, 20, 21], None, &[], Vec::new())
            .unwrap();
        assert_eq!(get(&r, INPUT_IDS), &Value::array::<u32>(vec![10, 11, 12, 20, 21, 9, 9, 9]));
        assert_eq!(get(&r, LABELS), &Value::array::<i32>(vec![11, 12, -100, 21, -100, -100, -100, -100]));
        assert_eq!(get(&r, POSITIONS), &Value::array::<i32>(vec![0, 1, 2, 0, 1, 0, 0, 0]));
        assert_eq!(get(&r, SEGMENT_IDS), &Value::array::<i32>(vec![1, 1, 1, 2, 2, 0, 0, 0]));
        assert_eq!(get(&r, CU_SEQLENS), &Value::array::<i32>(vec![0, 3, 5, 8, 8]));
        assert_eq!(get(&r, MAX_SEQLEN), &Value::Int(3));
        assert_eq!(get(&r, LOSS_MASK), &Value::array::<u8>(vec![1, 1, 0, 1, 0, 0, 0, 0]));
        assert_eq!(get(&r, NUM_TOKENS), &Value::Int(5));
        assert_eq!(r.lineage().fragments(), &[frag(1, 0, 3), frag(2, 5, 7)]);
    }

    #[test]
    fn full_row_has_no_padding_sequence() {
        let config = PackOptions { max_segments: 2, ..PackOptions::new(Algorithm::Wrap, 4) };
        let r = assemble(&config, &[frag(1, 0, 4)], vec![1, 2, 3, 4], None, &[], Vec::new()).unwrap();
        assert_eq!(get(&r, CU_SEQLENS), &Value::array::<i32>(vec![0, 4, 4, 4]));
        assert_eq!(get(&r, MAX_SEQLEN), &Value::Int(4));
        // A long padding run is the longest sequence.
        let r = assemble(&config, &[frag(1, 0, 1)], vec![1], None, &[], Vec::new()).unwrap();
        assert_eq!(get(&r, MAX_SEQLEN), &Value::Int(3));
    }

    #[test]
    fn refuses_shapes_it_never_makes() {
        let config = PackOptions { max_segments: 2, ..PackOptions::new(Algorithm::Wrap, 4) };
        assert!(assemble(&config, &[], vec![], None, &[], Vec::new()).is_err());
        assert!(
            assemble(&config, &[frag(1, 0, 1), frag(2, 0, 1), frag(3, 0, 1)], vec![1, 2, 3], None, &[], Vec::new())
                .is_err()
        );
        assert!(assemble(&config, &[frag(1, 0, 5)], vec![1, 2, 3, 4, 5], None, &[], Vec::new()).is_err());
        assert!(assemble(&config, &[frag(1, 0, 2)], vec![1], None, &[], Vec::new()).is_err());
        assert!(assemble(&config, &[frag(1, 2, 2)], vec![], None, &[], Vec::new()).is_err());
        assert!(assemble(&config, &[Fragment::whole(SampleId::new(0, 0, 1))], vec![], None, &[], Vec::new()).is_err());
    }

    #[test]
    fn a_growing_row_never_keeps_room_for_more_than_t_tokens() {
        let config = PackOptions { max_segments: 8, ..PackOptions::new(Algorithm::BestFit { bins: 4 }, 1024) };
        let piece = |row: u64, n: u32| Piece {
            fragment: frag(row, 0, n),
            tokens: vec![7u32; n as usize].into(),
            mask: None,
            attachments: Vec::new(),
            weight: 1.0,
        };
        let mut row = OpenRow::growing(&config);
        row.push(piece(1, 700)).unwrap();
        assert_eq!(row.tokens.capacity(), 700, "the first piece takes what it needs");
        row.push(piece(2, 300)).unwrap();
        assert!(row.tokens.capacity() <= 1024, "doubling 700 stops at T, not 1,400");
        let mut small = OpenRow::growing(&config);
        for r in 0..4 {
            small.push(piece(r, 10)).unwrap();
        }
        assert!(small.tokens.capacity() >= 40 && small.tokens.capacity() < 1024, "small rows still double");
    }

    #[test]
    fn placeholders_get_no_labels_and_attachments_learn_their_segment() {
        use zephon_operator::{Attachment, Span};
        let config = PackOptions { max_segments: 3, ..PackOptions::new(Algorithm::Wrap, 8) };
        let image = Attachment::new(&"image".into(), 0).placed(Span::at(1, 2).unwrap(), true);
        let mut row = OpenRow::new(&config);
        row.push(Piece {
            fragment: frag(1, 0, 2),
            tokens: vec![10, 11].into(),
            mask: None,
            attachments: Vec::new(),
            weight: 1.0,
        })
        .unwrap();
        row.push(Piece {
            fragment: frag(2, 0, 4),
            tokens: vec![20, 99, 99, 21].into(),
            mask: None,
            attachments: vec![image],
            weight: 1.0,
        })
        .unwrap();
        let r = row.into_record(&config).unwrap();
        // Position 2 (token 20) would predict a placeholder, position 3 predicts the other one.
        assert_eq!(get(&r, LABELS), &Value::array::<i32>(vec![11, -100, -100, -100, 21, -100, -100, -100]));
        let a = &r.attachments()[0];
        assert_eq!(a.span(), Span::at(3, 2), "moved to its place in the row");
        assert_eq!(a.get(SEGMENT), Some(&Value::Int(2)));
    }
}
