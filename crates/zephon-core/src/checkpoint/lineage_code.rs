//! The compact form of the lineage a checkpoint holds.
//!
//! A checkpoint is mostly lineage: every record a packing bin or shuffle buffer holds is named
//! by its fragments. Written as JSON, each fragment of a short document costs ~24 bytes, and a
//! shuffled dataset's row ids are nearly random, so general compression cannot shrink them
//! much. But every sample a lane holds came from the lane's own recent input, which the work
//! source can list again from the lane's cursor without any I/O. So a fragment names its
//! sample by how far back in the lane's input it was ("the 37th sample before the cursor"),
//! a number of a few bits, delta-coded against the previous one. A steered lane (one that
//! reads its datasets by a closed loop, [`crate::Steering`]) reads each dataset as a stream of
//! its own, so its samples are named by dataset and distance back in that dataset's stream.
//! Samples further back than [`WINDOW`] samples (or any, when no work source is given) are
//! written out in full.
//!
//! The codes go into three streams (structure, samples, spans) so that the deflate that
//! follows sees similar bytes together.

use std::collections::HashMap;
use std::sync::Arc;

use crate::checkpoint::LaneState;
use crate::source::WorkSource;
use zephon_operator::{Extent, Fragment, Lane, Lineage, SampleId, Span};

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

/// One input stream of a lane before its cursor, most recent first, listed lazily from the
/// work source: the lane's chunks, or a steered lane's chunks of one dataset.
struct Window<'a> {
    streams: &'a LaneStreams,
    lane: Lane,
    dataset: Option<u32>,
    /// The chunk the stream's cursor is in, and how many of its samples were read: the
    /// samples before the cursor and the one at it (a restore inside it may have pushed some
    /// of its pieces); 0 for a dataset a steered lane has not started its next chunk of.
    first: u64,
    take_first: usize,
    /// The chunk to list next (walking back), `None` past the first.
    next: Option<u64>,
    walked: u64,
    ids: Vec<SampleId>,
    /// Where each id first appears (writing only).
    index: HashMap<SampleId, u64>,
}

impl<'a> Window<'a> {
    fn new(streams: &'a LaneStreams, lane: Lane, dataset: Option<u32>, first: u64, take_first: usize) -> Self {
        Window {
            streams,
            lane,
            dataset,
            first,
            take_first,
            next: Some(first),
            walked: 0,
            ids: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// Lists one more chunk; false when there is nothing more to list.
    fn grow(&mut self, indexed: bool) -> Result<bool, String> {
        let Some(n) = self.next else { return Ok(false) };
        if self.ids.len() >= WINDOW || self.walked >= MAX_CHUNKS {
            return Ok(false);
        }
        self.walked += 1;
        self.next = n.checked_sub(1);
        let (source, lanes) = (&self.streams.source, self.streams.lanes);
        let chunk = match (self.dataset, source.steering()) {
            (None, _) => source.chunk(self.lane, lanes, n).map_err(|e| e.to_string())?,
            (Some(d), Some(s)) => s.dataset_chunk(self.lane, lanes, d, n).map_err(|e| e.to_string())?,
            (Some(_), None) => return Err("a steered lane's lineage, but the work source does not steer".into()),
        };
        let Some(samples) = chunk.map(|c| c.samples) else { return Ok(true) };
        let take = if n == self.first { self.take_first.min(samples.len()) } else { samples.len() };
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

/// A lane's input streams before its cursor: one for a position-addressed lane, one a dataset
/// for a steered one (with the previous distance named in each, for delta coding).
struct Windows<'a> {
    windows: Vec<(Window<'a>, u64)>,
    steered: bool,
}

impl<'a> Windows<'a> {
    fn new(streams: &'a LaneStreams, st: &LaneState) -> Result<Self, String> {
        if st.lane.0 >= streams.lanes {
            return Err(format!("{} is not one of the run's {} lanes", st.lane, streams.lanes));
        }
        let at_cursor = usize::try_from(st.cursor.offset.saturating_add(1)).unwrap_or(usize::MAX);
        let Some(steer) = &st.steer else {
            let w = Window::new(streams, st.lane, None, st.cursor.chunk, at_cursor);
            return Ok(Windows { windows: vec![(w, 0)], steered: false });
        };
        let datasets = streams.source.steering().map_or(0, |s| s.datasets()) as usize;
        if steer.chunks.len() != datasets {
            return Err(format!("{} steers {} datasets, the work source {datasets}", st.lane, steer.chunks.len()));
        }
        // Each dataset's stream up to its next input, and that input too if the lane is
        // inside it (it may have pushed some of its pieces).
        let windows = (0..datasets)
            .map(|d| {
                let offset = steer.offsets.get(d).copied().unwrap_or(0);
                let inside = steer.progress.get(d).is_some_and(|&p| p > 0);
                let take = offset.saturating_add(u64::from(inside));
                let take = usize::try_from(take).unwrap_or(usize::MAX);
                (Window::new(streams, st.lane, Some(d as u32), steer.chunks[d], take), 0)
            })
            .collect();
        Ok(Windows { windows, steered: true })
    }

    /// The window holding samples of `dataset`.
    fn of(&mut self, dataset: u32) -> Option<&mut (Window<'a>, u64)> {
        let i = if self.steered { dataset as usize } else { 0 };
        self.windows.get_mut(i)
    }
}

const SPAN: u64 = 1;
const FULL_ID: u64 = 2;
/// On a steered lane, a sample named by distance is two codes: `dataset << 2 | STREAM`, whose
/// stream the distance is in (`FULL_ID` clear, which tells it from a full id's tag), then the
/// tag with the distance.
const STREAM: u64 = 1;

/// Encodes the lineage of `lanes` (accumulator buffers, then pending rows, lane by lane) and
/// empties it from the states; the rest of each state goes to JSON.
pub(crate) fn encode(lanes: &mut [LaneState], streams: Option<&LaneStreams>) -> Result<Vec<u8>, String> {
    let mut out = Streams::default();
    for st in lanes.iter_mut() {
        let mut windows = streams.map(|s| Windows::new(s, st)).transpose()?;
        let steered = windows.as_ref().is_some_and(|w| w.steered);
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
                    let window = windows.as_mut().and_then(|w| w.of(f.sample.dataset));
                    let found = match window {
                        Some((w, prev)) => w.find(f.sample)?.map(|d| (d, prev)),
                        None => None,
                    };
                    match found {
                        Some((d, prev)) => {
                            // A steered lane's distance is within its dataset's stream.
                            if steered {
                                put(&mut out.samples, u64::from(f.sample.dataset) << 2 | STREAM);
                            }
                            put(&mut out.samples, (zigzag(d.wrapping_sub(*prev) as i64) << 2) | span_flag);
                            *prev = d;
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
        let mut windows = streams.map(|s| Windows::new(s, st)).transpose()?;
        let steered = st.steer.is_some();
        // Without the streams, a sample named by distance decodes as row `distance` of dataset
        // `u32::MAX`, with one previous distance for all its datasets.
        let mut prev_unresolved = 0u64;
        let lists = st.accumulators.len() + 1;
        for list_no in 0..lists {
            let n = input.structure.count("records")?;
            let mut list = Vec::with_capacity(n.min(4096));
            for _ in 0..n {
                let k = input.structure.count("fragments")?;
                let mut fragments = Vec::with_capacity(k.min(4096));
                for _ in 0..k {
                    let mut tag = input.samples.varint()?;
                    let mut stream = 0u32;
                    if steered && tag & FULL_ID == 0 {
                        stream = small(tag >> 2, "dataset")?;
                        tag = input.samples.varint()?;
                        if tag & FULL_ID != 0 {
                            return Err(format!("{}: a dataset named twice for one sample", st.lane));
                        }
                    }
                    let sample = if tag & FULL_ID != 0 {
                        let dataset = small(input.samples.varint()?, "dataset")?;
                        let shard = small(input.samples.varint()?, "shard")?;
                        SampleId::new(dataset, shard, input.samples.varint()?)
                    } else {
                        match windows.as_mut() {
                            Some(ws) => {
                                let (w, prev) = ws.of(stream).ok_or_else(|| {
                                    format!("{} names a sample of dataset {stream}, which it does not read", st.lane)
                                })?;
                                let d = prev.wrapping_add(unzigzag(tag >> 2) as u64);
                                *prev = d;
                                w.at(d)?.ok_or_else(|| {
                                    format!(
                                        "{} names sample {d} back from its cursor, before the lane's input began",
                                        st.lane
                                    )
                                })?
                            }
                            None => {
                                let d = prev_unresolved.wrapping_add(unzigzag(tag >> 2) as u64);
                                prev_unresolved = d;
                                SampleId::new(u32::MAX, 0, d)
                            }
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
    use crate::checkpoint::{Cursor, SteerState, TailDropped};
    use crate::source::{Chunk, Steering};
    use zephon_operator::AccumulatorState;

    /// Lane `l`'s chunk `n` is rows `100·(n·L + l) ..+ 100` of dataset 0, shuffled a little.
    struct Rows;

    impl WorkSource for Rows {
        fn chunk(&self, lane: Lane, lanes: u32, n: u64) -> crate::Result<Option<Chunk>> {
            let g = n * u64::from(lanes) + u64::from(lane.0);
            Ok(Some(Chunk {
                index: g,
                samples: (0..100).map(|i| SampleId::new(0, 0, g * 100 + (i * 37) % 100)).collect(),
            }))
        }
        fn fingerprint(&self) -> zephon_operator::Settings {
            zephon_operator::Settings::new("test", 1).set("text", "rows")
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
            steer: None,
            accumulators: vec![AccumulatorState { values: vec![1, 2], buffered }, AccumulatorState::default()],
            pending,
        }
    }

    /// Two datasets; lane `l`'s chunk `k` of dataset `d` is rows `50·(k·L + l) ..+ 50` of it.
    struct TwoStreams;

    impl WorkSource for TwoStreams {
        fn chunk(&self, lane: Lane, _: u32, _: u64) -> crate::Result<Option<Chunk>> {
            Err(crate::Error::Source { lane, message: "steered".into() })
        }
        fn fingerprint(&self) -> zephon_operator::Settings {
            zephon_operator::Settings::new("test", 1).set("text", "two streams")
        }
        fn steering(&self) -> Option<&dyn Steering> {
            Some(self)
        }
    }

    impl Steering for TwoStreams {
        fn datasets(&self) -> u32 {
            2
        }
        fn dataset_chunk(&self, lane: Lane, lanes: u32, d: u32, k: u64) -> crate::Result<Option<Chunk>> {
            let g = k * u64::from(lanes) + u64::from(lane.0);
            Ok(Some(Chunk { index: g, samples: (0..50).map(|i| SampleId::new(d, 0, g * 50 + i)).collect() }))
        }
        fn shares(&self) -> &crate::ShareSchedule {
            static EVEN: std::sync::OnceLock<crate::ShareSchedule> = std::sync::OnceLock::new();
            EVEN.get_or_init(|| crate::ShareSchedule::constant(&[1.0, 1.0]).expect("valid shares"))
        }
        fn next_dataset(&self, _: &[f64], _: &[u64], _: &[bool]) -> Option<u32> {
            Some(0)
        }
        fn input_tokens(&self, _: u32) -> f64 {
            1.0
        }
    }

    /// A steered lane names its samples by dataset and distance within that dataset's stream:
    /// they round-trip, cost a couple of bytes each, and one of a chunk not yet reached is
    /// written in full.
    #[test]
    fn a_steered_lanes_samples_are_named_by_distance_in_their_dataset() {
        let streams = LaneStreams::new(Arc::new(TwoStreams), 4);
        // Lane 1 is inside dataset 1's input 20 of chunk 3 and has read 5 chunks of dataset 0.
        let mut st = state(1, Cursor::default(), vec![], vec![]);
        st.steer = Some(SteerState {
            chunks: vec![5, 3],
            offsets: vec![0, 20],
            progress: vec![0, 2],
            delivered: vec![9, 9],
            ..SteerState::start(2)
        });
        let a = |k: u64, i: u64| SampleId::new(0, 0, (k * 4 + 1) * 50 + i);
        let b = |k: u64, i: u64| SampleId::new(1, 0, (k * 4 + 1) * 50 + i);
        let held: Vec<Lineage> = [a(4, 7), b(3, 20), b(2, 1), a(0, 0), a(3, 49), b(3, 2)]
            .into_iter()
            .map(|s| Lineage::single(Fragment::whole(s)))
            .collect();
        // Not yet read: dataset 0's chunk 5 and dataset 1's chunk 3 past the cursor.
        let unread = vec![Lineage::single(Fragment::whole(a(5, 0))), Lineage::single(Fragment::whole(b(3, 21)))];
        st.accumulators[0].buffered = held.clone();
        st.pending = unread.clone();
        let original = vec![st];
        let mut lanes = original.clone();
        let bytes = encode(&mut lanes, Some(&streams)).unwrap();
        decode(&bytes, &mut lanes, Some(&streams)).unwrap();
        assert_eq!(lanes, original);
        let mut alone = original.clone();
        alone[0].pending.clear();
        let named = encode(&mut alone, Some(&streams)).unwrap().len();
        let mut full = original.clone();
        full[0].pending.clear();
        let in_full = encode(&mut full, None).unwrap().len();
        assert!(named < in_full, "{named} bytes by distance, {in_full} in full");
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
