//! The compact form of the lineage a checkpoint holds.
//!
//! A checkpoint is mostly lineage: every record a packing bin or shuffle buffer holds is named
//! by its fragments. Written as JSON, each fragment of a short document costs ~24 bytes, and a
//! shuffled dataset's row ids are nearly random, so general compression cannot shrink them
//! much. But every sample a lane holds came from the lane's own recent input, which the work
//! source can list again from the lane's cursor without any I/O. So a fragment names its
//! sample by how far back in the lane's input it was ("the 37th sample before the cursor"),
//! a number of a few bits, delta-coded against the previous one. Samples further back than
//! [`WINDOW`] samples (or any, when no work source is given) are written out in full.
//!
//! The codes go into three streams (structure, samples, spans) so that the deflate that
//! follows sees similar bytes together.

use std::collections::HashMap;
use std::sync::Arc;

use crate::checkpoint::{Cursor, LaneState};
use crate::id::{Lane, SampleId};
use crate::lineage::{Extent, Fragment, Lineage, Span};
use crate::source::WorkSource;

/// How many of a lane's most recent samples can be named by distance. Further back, a
/// sample is written in full: the window bounds what writing and reading a checkpoint cost.
pub const WINDOW: usize = 1 << 16;

/// The most chunks a window walks back, however small they are.
const MAX_CHUNKS: u64 = 1 << 16;

/// The lanes' sample streams: what lets a checkpoint name a sample by how far back in its
/// lane's input it came, instead of by its id.
#[derive(Clone)]
pub struct LaneStreams {
    source: Arc<dyn WorkSource>,
    lanes: u32,
}

impl LaneStreams {
    /// The streams `source` deals to `lanes` lanes.
    pub fn new(source: Arc<dyn WorkSource>, lanes: u32) -> Self {
        LaneStreams { source, lanes }
    }
}

impl std::fmt::Debug for LaneStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LaneStreams({} lanes of {})", self.lanes, self.source.describe())
    }
}

/// Equal when they are the same source dealt to as many lanes.
impl PartialEq for LaneStreams {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.source, &other.source) && self.lanes == other.lanes
    }
}

impl Eq for LaneStreams {}

/// A lane's input before its cursor, most recent first, listed lazily from the work source.
struct Window<'a> {
    streams: &'a LaneStreams,
    lane: Lane,
    cursor: Cursor,
    /// The lane chunk to list next (walking back), `None` past the first.
    next: Option<u64>,
    walked: u64,
    ids: Vec<SampleId>,
    /// Where each id first appears (writing only).
    index: HashMap<SampleId, u64>,
}

impl<'a> Window<'a> {
    fn new(streams: &'a LaneStreams, lane: Lane, cursor: Cursor) -> Self {
        Window { streams, lane, cursor, next: Some(cursor.chunk), walked: 0, ids: Vec::new(), index: HashMap::new() }
    }

    /// Lists one more chunk; false when there is nothing more to list.
    fn grow(&mut self, indexed: bool) -> Result<bool, String> {
        let Some(n) = self.next else { return Ok(false) };
        if self.ids.len() >= WINDOW || self.walked >= MAX_CHUNKS {
            return Ok(false);
        }
        self.walked += 1;
        self.next = n.checked_sub(1);
        let samples = match self.streams.source.chunk(self.lane, self.streams.lanes, n)? {
            Some(c) => c.samples,
            None => return Ok(true),
        };
        // Of the cursor's own chunk, only what was pushed: the samples before the cursor and
        // the one at it (a restore inside it may have pushed some of its pieces).
        let take = if n == self.cursor.chunk {
            usize::try_from(self.cursor.offset.saturating_add(1)).unwrap_or(usize::MAX).min(samples.len())
        } else {
            samples.len()
        };
        for s in samples[..take].iter().rev() {
            if self.ids.len() >= WINDOW {
                break;
            }
            if indexed {
                self.index.entry(*s).or_insert(self.ids.len() as u64);
            }
            self.ids.push(*s);
        }
        Ok(true)
    }

    fn find(&mut self, id: SampleId) -> Result<Option<u64>, String> {
        loop {
            if let Some(&p) = self.index.get(&id) {
                return Ok(Some(p));
            }
            if !self.grow(true)? {
                return Ok(None);
            }
        }
    }

    fn at(&mut self, back: u64) -> Result<Option<SampleId>, String> {
        let i = usize::try_from(back).map_err(|_| format!("sample {back} back is out of range"))?;
        while self.ids.len() <= i {
            if !self.grow(false)? {
                return Ok(None);
            }
        }
        Ok(Some(self.ids[i]))
    }
}

const SPAN: u64 = 1;
const FULL_ID: u64 = 2;

/// Encodes the lineage of `lanes` (accumulator buffers, then pending rows, lane by lane) and
/// empties it from the states; the rest of each state goes to JSON.
pub(crate) fn encode(lanes: &mut [LaneState], streams: Option<&LaneStreams>) -> Result<Vec<u8>, String> {
    let mut out = Streams::default();
    for st in lanes.iter_mut() {
        if let Some(s) = streams.filter(|s| st.lane.0 >= s.lanes) {
            return Err(format!("{} is not one of the run's {} lanes", st.lane, s.lanes));
        }
        let mut window = streams.map(|s| Window::new(s, st.lane, st.cursor));
        let mut prev = 0u64;
        let mut lists: Vec<Vec<Lineage>> =
            st.accumulators.iter_mut().map(|a| std::mem::take(&mut a.buffered)).collect();
        lists.push(std::mem::take(&mut st.pending));
        for list in &lists {
            put(&mut out.structure, list.len() as u64);
            for lineage in list {
                put(&mut out.structure, lineage.fragments().len() as u64);
                for f in lineage.fragments() {
                    let span_flag = match f.extent {
                        Extent::Whole => 0,
                        Extent::Span(s) => {
                            put(&mut out.spans, u64::from(s.start()));
                            put(&mut out.spans, u64::from(s.len()));
                            SPAN
                        }
                    };
                    let back = match window.as_mut() {
                        Some(w) => w.find(f.sample)?,
                        None => None,
                    };
                    match back {
                        Some(d) => {
                            put(&mut out.samples, (zigzag(d.wrapping_sub(prev) as i64) << 2) | span_flag);
                            prev = d;
                        }
                        None => {
                            put(&mut out.samples, FULL_ID | span_flag);
                            put(&mut out.samples, u64::from(f.sample.dataset));
                            put(&mut out.samples, u64::from(f.sample.shard));
                            put(&mut out.samples, f.sample.row);
                        }
                    }
                }
            }
        }
    }
    Ok(out.concat())
}

/// Decodes what [`encode`] wrote back into the states (parsed from the JSON, lineage empty).
/// Without `streams`, samples named by distance decode as row `distance` of dataset
/// `u32::MAX`: enough to check the structure (what `inspect` does), not to restore.
pub(crate) fn decode(bytes: &[u8], lanes: &mut [LaneState], streams: Option<&LaneStreams>) -> Result<(), String> {
    let mut input = Streams::split(bytes)?;
    for st in lanes.iter_mut() {
        if let Some(s) = streams.filter(|s| st.lane.0 >= s.lanes) {
            return Err(format!("{} is not one of the run's {} lanes", st.lane, s.lanes));
        }
        let mut window = streams.map(|s| Window::new(s, st.lane, st.cursor));
        let mut prev = 0u64;
        let lists = st.accumulators.len() + 1;
        for list_no in 0..lists {
            let n = input.structure.count("records")?;
            let mut list = Vec::with_capacity(n.min(4096));
            for _ in 0..n {
                let k = input.structure.count("fragments")?;
                let mut fragments = Vec::with_capacity(k.min(4096));
                for _ in 0..k {
                    let tag = input.samples.varint()?;
                    let sample = if tag & FULL_ID != 0 {
                        let dataset = small(input.samples.varint()?, "dataset")?;
                        let shard = small(input.samples.varint()?, "shard")?;
                        SampleId::new(dataset, shard, input.samples.varint()?)
                    } else {
                        let d = prev.wrapping_add(unzigzag(tag >> 2) as u64);
                        prev = d;
                        match window.as_mut() {
                            Some(w) => w.at(d)?.ok_or_else(|| {
                                format!(
                                    "{} names sample {d} back from its cursor, before the lane's input began",
                                    st.lane
                                )
                            })?,
                            None => SampleId::new(u32::MAX, 0, d),
                        }
                    };
                    let extent = if tag & SPAN != 0 {
                        let start = small(input.spans.varint()?, "span start")?;
                        let len = small(input.spans.varint()?, "span length")?;
                        let span = Span::at(start, len).ok_or_else(|| format!("span {start}+{len} overflows"))?;
                        Extent::Span(span)
                    } else {
                        Extent::Whole
                    };
                    fragments.push(Fragment { sample, extent });
                }
                list.push(Lineage::from_fragments(fragments));
            }
            match st.accumulators.get_mut(list_no) {
                Some(a) => a.buffered = list,
                None => st.pending = list,
            }
        }
    }
    if !(input.structure.is_empty() && input.samples.is_empty() && input.spans.is_empty()) {
        return Err("lineage has bytes left over after the last lane".into());
    }
    Ok(())
}

fn small(x: u64, what: &str) -> Result<u32, String> {
    u32::try_from(x).map_err(|_| format!("{what} {x} is out of range"))
}

fn zigzag(x: i64) -> u64 {
    ((x << 1) ^ (x >> 63)) as u64
}

fn unzigzag(x: u64) -> i64 {
    ((x >> 1) as i64) ^ -((x & 1) as i64)
}

fn put(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

#[derive(Default)]
struct Streams {
    structure: Vec<u8>,
    samples: Vec<u8>,
    spans: Vec<u8>,
}

impl Streams {
    fn concat(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.structure.len() + self.samples.len() + self.spans.len() + 30);
        for s in [&self.structure, &self.samples, &self.spans] {
            put(&mut out, s.len() as u64);
            out.extend_from_slice(s);
        }
        out
    }

    fn split(bytes: &[u8]) -> Result<Readers<'_>, String> {
        let mut r = Reader(bytes);
        let mut part = |what: &str| -> Result<Reader<'_>, String> {
            let n = usize::try_from(r.varint()?).map_err(|_| format!("the {what} stream's length is out of range"))?;
            if r.0.len() < n {
                return Err(format!("the {what} stream is cut short"));
            }
            let (head, tail) = r.0.split_at(n);
            r.0 = tail;
            Ok(Reader(head))
        };
        let readers = Readers { structure: part("structure")?, samples: part("samples")?, spans: part("spans")? };
        if !r.0.is_empty() {
            return Err("lineage has bytes after its three streams".into());
        }
        Ok(readers)
    }
}

struct Readers<'a> {
    structure: Reader<'a>,
    samples: Reader<'a>,
    spans: Reader<'a>,
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut x = 0u64;
        for (i, &b) in self.0.iter().enumerate().take(10) {
            let bits = u64::from(b & 0x7f);
            if i == 9 && bits > 1 {
                return Err("a number in the lineage overflows 64 bits".into());
            }
            x |= bits << (7 * i);
            if b & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Ok(x);
            }
        }
        Err("the lineage ends inside a number".into())
    }

    /// A count of items still to read. Corrupt input can claim any count: reading the items
    /// fails when the bytes run out, and the count only reserves up to a small capacity.
    fn count(&mut self, what: &str) -> Result<usize, String> {
        let n = self.varint()?;
        usize::try_from(n).map_err(|_| format!("{n} {what} is out of range"))
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::TailDropped;
    use crate::operator::AccumulatorState;
    use crate::source::Chunk;

    /// Lane `l`'s chunk `n` is rows `100·(n·L + l) ..+ 100` of dataset 0, shuffled a little.
    struct Rows;

    impl WorkSource for Rows {
        fn chunk(&self, lane: Lane, lanes: u32, n: u64) -> Result<Option<Chunk>, String> {
            let g = n * u64::from(lanes) + u64::from(lane.0);
            Ok(Some(Chunk {
                index: g,
                samples: (0..100).map(|i| SampleId::new(0, 0, g * 100 + (i * 37) % 100)).collect(),
            }))
        }
        fn fingerprint(&self) -> String {
            "rows".into()
        }
    }

    fn state(lane: u32, cursor: Cursor, buffered: Vec<Lineage>, pending: Vec<Lineage>) -> LaneState {
        LaneState {
            lane: Lane(lane),
            cursor,
            input_progress: 0,
            rows_emitted: 0,
            skips: Default::default(),
            finished: false,
            tail_dropped: TailDropped::default(),
            accumulators: vec![AccumulatorState { values: vec![1, 2], buffered }, AccumulatorState::default()],
            pending,
        }
    }

    fn frag(row: u64, span: Option<(u32, u32)>) -> Fragment {
        let id = SampleId::new(0, 0, row);
        match span {
            Some((a, b)) => Fragment::range(id, a, b).unwrap(),
            None => Fragment::whole(id),
        }
    }

    #[test]
    fn lineage_round_trips_with_and_without_streams() {
        let streams = LaneStreams::new(Arc::new(Rows), 4);
        // Lane 1 at chunk 3, sample 20: its recent rows are from global chunks 13 (pushed
        // part), 9, 5, 1. Row 7 and row 3_000_000_000 are not in its window.
        let near: Vec<Lineage> = vec![
            Lineage::from_fragments(vec![frag(1300 + 37 * 3 % 100, Some((0, 19))), frag(905, Some((1024, 2048)))]),
            Lineage::single(frag(7, None)),
            Lineage::single(frag(3_000_000_000, Some((5, 6)))),
            Lineage::default(),
        ];
        let pending = vec![Lineage::single(frag(503, Some((0, 1))))];
        let original = vec![state(1, Cursor { chunk: 3, offset: 20 }, near.clone(), pending.clone())];
        for s in [Some(&streams), None] {
            let mut lanes = original.clone();
            let bytes = encode(&mut lanes, s).unwrap();
            assert!(lanes[0].accumulators[0].buffered.is_empty() && lanes[0].pending.is_empty());
            decode(&bytes, &mut lanes, s.or(Some(&streams))).unwrap();
            assert_eq!(lanes, original);
        }
    }

    #[test]
    fn samples_near_the_cursor_cost_about_a_byte() {
        let streams = LaneStreams::new(Arc::new(Rows), 4);
        let recent: Vec<Lineage> =
            (0..300u64).map(|i| Lineage::single(frag(1300 + (i % 21) * 37 % 100, None))).collect();
        let mut lanes = vec![state(1, Cursor { chunk: 3, offset: 20 }, recent.clone(), vec![])];
        let relative = encode(&mut lanes, Some(&streams)).unwrap();
        let mut lanes = vec![state(1, Cursor { chunk: 3, offset: 20 }, recent, vec![])];
        let absolute = encode(&mut lanes, None).unwrap();
        // One byte for the fragment count, one for the sample (5 with its id in full).
        assert!(relative.len() < 2 * 300 + 40, "{} bytes", relative.len());
        assert!(absolute.len() > 5 * 300, "{} bytes", absolute.len());
    }

    #[test]
    fn corrupt_lineage_is_an_error_not_a_panic() {
        let streams = LaneStreams::new(Arc::new(Rows), 4);
        let lineage = vec![Lineage::from_fragments(vec![frag(1301, Some((0, 19))), frag(905, None)])];
        let mut lanes = vec![state(1, Cursor { chunk: 3, offset: 20 }, lineage, vec![])];
        let bytes = encode(&mut lanes, Some(&streams)).unwrap();
        for cut in 0..bytes.len() {
            let mut l = lanes.clone();
            assert!(decode(&bytes[..cut], &mut l, Some(&streams)).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer, &mut lanes.clone(), Some(&streams)).is_err());
        // A distance before the lane's first sample.
        let mut far = vec![state(1, Cursor { chunk: 0, offset: 0 }, vec![], vec![])];
        let mut s = Streams::default();
        put(&mut s.structure, 1);
        put(&mut s.structure, 1);
        put(&mut s.samples, zigzag(5) << 2);
        for _ in 0..2 {
            put(&mut s.structure, 0);
        }
        let err = decode(&s.concat(), &mut far, Some(&streams)).unwrap_err();
        assert!(err.contains("before the lane's input began"), "{err}");
        // A lane the run does not have: refused before its cursor reaches the chunk deal.
        let mut lanes = vec![state(1, Cursor { chunk: 3, offset: 20 }, vec![], vec![])];
        let bytes = encode(&mut lanes, Some(&streams)).unwrap();
        lanes[0].lane = Lane(4);
        let err = decode(&bytes, &mut lanes, Some(&streams)).unwrap_err();
        assert!(err.contains("not one of the run's 4 lanes"), "{err}");
    }
}
