//! The end of a finite stream, shared so that every lane ends with the same tokens.
//!
//! Chunks are dealt by position, so a lane's tokens are a random walk over the lengths of the
//! documents it draws: on a corpus of ~3 k-token documents mixed with one-line ones, 8 lanes
//! end tens of steps apart, and under `tail = "drop"` (the run ends with the first lane) what
//! the other lanes still hold is lost. Per-dataset estimates cannot see that spread; each
//! row's own length can. With every row's estimated tokens, the deal is kept up to a late block, and the
//! documents from there to the end are shared out so that all lanes reach the same total
//! ([`plan`]). Everything dealt before that block is unchanged.

use serde::{Deserialize, Serialize};
use zephon_core::Datasets;
use zephon_operator::{OpError, SampleId};

use crate::error::{Error, Result};

/// How the end of a finite stream is shared among lanes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// The last, partial block of chunks is cut into equal pieces of estimated tokens (each
    /// row counts its dataset's mean). Lanes still drift apart by the spread of document
    /// lengths.
    #[default]
    Estimates,
    /// The stream's end is shared out by each row's own estimated tokens (its text length ×
    /// its dataset's tokens per byte): the text of every row is read once, when the run is
    /// built. Tokens per byte vary by document (0.18–0.48 on corpus B with GPT-2), so lanes
    /// still end apart by that.
    RowSizes,
    /// The stream's end is shared out by each row's tokens, counted: every row is tokenized
    /// once when the run is built (a pass of tokenizing, cached on disk), and lanes end
    /// within a few tokens of each other.
    RowTokens,
}

/// The re-cut end of a finite stream, for one lane count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TailPlan {
    /// The lane count it was planned for.
    pub lanes: u32,
    /// The first block (every lane's chunk number) that is re-cut.
    pub block: u64,
    /// Each lane's share of the re-cut stretch, in stream order.
    pub pieces: Vec<Vec<SampleId>>,
    /// Estimated tokens of the lane with the fewest and of the lane with the most.
    pub spread: (u64, u64),
    /// Each lane's tokens of the whole stream, as planned (without the offset it was planned
    /// against).
    pub totals: Vec<u64>,
}

impl TailPlan {
    /// A short, canonical name of the plan for the fingerprint.
    pub fn digest(&self) -> String {
        let mut h = zephon_operator::Hasher::new();
        for piece in &self.pieces {
            h.update(&(piece.len() as u64).to_le_bytes());
            for s in piece {
                h.update(&s.dataset.to_le_bytes());
                h.update(&s.shard.to_le_bytes());
                h.update(&s.row.to_le_bytes());
            }
        }
        format!("rows(lanes={}, block={}, pieces={})", self.lanes, self.block, &h.finish().to_hex()[..16])
    }
}

/// The plan for `lanes` lanes, given the estimated tokens of every chunk (`chunk_tokens[g]`),
/// the deal (`deal(lane, n)`, a global chunk index) and the stream's end (`stream(g)`: the
/// samples from the start of chunk `g` to the end, with their estimated tokens). `offset[l]`
/// is what lane l holds already from elsewhere (other datasets' streams of a steered mixture):
/// the plan evens out the lanes' totals with it.
///
/// The deal is kept up to the latest block `b` from which the rest can top every lane up to
/// the one holding the most, and one block more, so that the last documents placed are
/// small. The rest goes out largest document first, each to the lane with the fewest tokens
/// so far, and moves and swaps of documents between lanes then even out what that left
/// ([`even_out`]): the lanes end within a few tokens of each other, unless the stretch holds
/// too few documents to choose from (contiguous pieces of the stretch would leave them up to
/// half the largest document apart). Each lane reads its share in stream order.
pub(crate) fn plan(
    lanes: u32,
    chunk_tokens: &[u64],
    deal: impl Fn(u32, u64) -> u64,
    stream: impl Fn(u64) -> (Vec<SampleId>, Vec<u64>),
    offset: &[u64],
) -> TailPlan {
    let l = u64::from(lanes);
    let full = chunk_tokens.len() as u64 / l;
    let mut held: Vec<u64> = (0..lanes as usize).map(|i| offset.get(i).copied().unwrap_or(0)).collect();
    for n in 0..full {
        for (lane, h) in held.iter_mut().enumerate() {
            *h += chunk_tokens[deal(lane as u32, n) as usize];
        }
    }
    let mut rest: u64 = chunk_tokens[(full * l) as usize..].iter().sum();
    let mut block = full;
    let mut slack_blocks = 1;
    loop {
        let (sum, max) = (held.iter().sum::<u64>(), held.iter().copied().max().unwrap_or(0));
        let fits = u128::from(max) * u128::from(l) <= u128::from(sum) + u128::from(rest);
        if block == 0 || (fits && slack_blocks == 0) {
            break;
        }
        if fits {
            slack_blocks -= 1;
        }
        block -= 1;
        for (lane, h) in held.iter_mut().enumerate() {
            let t = chunk_tokens[deal(lane as u32, block) as usize];
            *h -= t;
            rest += t;
        }
    }
    let (samples, tokens) = stream(block * l);
    let mut by_size: Vec<usize> = (0..samples.len()).collect();
    by_size.sort_unstable_by(|&a, &b| tokens[b].cmp(&tokens[a]).then(a.cmp(&b)));
    let mut lightest: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u32)>> =
        held.iter().enumerate().map(|(lane, &h)| std::cmp::Reverse((h, lane as u32))).collect();
    let mut shares: Vec<Vec<usize>> = vec![Vec::new(); lanes as usize];
    for i in by_size {
        let Some(std::cmp::Reverse((load, lane))) = lightest.pop() else { break };
        shares[lane as usize].push(i);
        lightest.push(std::cmp::Reverse((load + tokens[i], lane)));
    }
    let mut totals = vec![0u64; lanes as usize];
    for std::cmp::Reverse((load, lane)) in lightest {
        totals[lane as usize] = load;
    }
    even_out(&mut shares, &mut totals, &tokens);
    let spread = (totals.iter().copied().min().unwrap_or(0), totals.iter().copied().max().unwrap_or(0));
    let own: Vec<u64> =
        totals.iter().enumerate().map(|(i, t)| t.saturating_sub(offset.get(i).copied().unwrap_or(0))).collect();
    let pieces = shares
        .into_iter()
        .map(|mut idx| {
            idx.sort_unstable();
            idx.into_iter().map(|i| samples[i]).collect()
        })
        .collect();
    TailPlan { lanes, block, pieces, spread, totals: own }
}

/// Narrows the gap between the lanes after largest-first: largest first leaves them apart by
/// up to the size of the last documents placed, which is most of a document when the stretch
/// holds only long ones (pages of ~17 k tokens end thousands of tokens apart). Each move takes
/// the heaviest lane down (against one of the 8 lightest) or the lightest up (against one of
/// the 8 heaviest): one document moved to another lane, or two swapped, whichever evens the
/// pair out most. Every move shrinks the sum of squared loads, so this ends; it also stops
/// after a bounded number of moves, and once no lane is more than 16 tokens from another.
fn even_out(shares: &mut [Vec<usize>], totals: &mut [u64], tokens: &[u64]) {
    // Lanes this close lose at most L × 16 tokens under `drop`: not worth more moves (with
    // thousands of one-line documents in the stretch, each move costs a sort of a lane's).
    const CLOSE_ENOUGH: u64 = 16;
    const PAIRED: usize = 8;
    let n = totals.len();
    for _ in 0..64 * n {
        // Lanes by load, lightest first (ties: lower lane first).
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_unstable_by_key(|&x| (totals[x], x));
        let (Some(&light), Some(&heavy)) = (order.first(), order.last()) else { return };
        // The heaviest against the lightest few, the lightest against the heaviest few: with
        // thousands of lanes, trying every pair on every move would cost seconds.
        let few = order.len().min(PAIRED);
        let pairs = order[..few]
            .iter()
            .filter(|&&x| x != heavy)
            .map(|&x| (heavy, x))
            .chain(order[order.len() - few..].iter().filter(|&&x| x != light).map(|&x| (x, light)));
        // The move that lowers the sum of squared loads most: moving d from a lane `gap` above
        // another lowers it by 2d(gap - d).
        let mut best: Option<(u128, usize, usize, usize, Option<usize>)> = None;
        for (from, to) in pairs {
            let gap = totals[from].saturating_sub(totals[to]);
            if gap <= CLOSE_ENOUGH {
                continue;
            }
            if let Some((d, k, j)) = best_transfer(&shares[from], &shares[to], tokens, gap) {
                let gain = u128::from(d) * u128::from(gap - d);
                if best.is_none_or(|(g, ..)| gain > g) {
                    best = Some((gain, from, to, k, j));
                }
            }
        }
        let Some((_, from, to, k, j)) = best else { return };
        let a = shares[from].swap_remove(k);
        let mut moved = tokens[a];
        if let Some(j) = j {
            let b = shares[to].swap_remove(j);
            moved -= tokens[b];
            shares[from].push(b);
        }
        shares[to].push(a);
        totals[from] -= moved;
        totals[to] += moved;
    }
}

/// Of the documents of `from` (moved alone, or swapped for one of `to`), the transfer d with
/// 0 < d < `gap` closest to `gap` / 2: (d, index in `from`, index in `to` if swapped).
fn best_transfer(from: &[usize], to: &[usize], tokens: &[u64], gap: u64) -> Option<(u64, usize, Option<usize>)> {
    let mut theirs: Vec<(u64, Option<usize>)> = to.iter().enumerate().map(|(j, &i)| (tokens[i], Some(j))).collect();
    theirs.push((0, None));
    theirs.sort_unstable();
    let mut best: Option<(u64, usize, Option<usize>)> = None;
    for (k, &i) in from.iter().enumerate() {
        let a = tokens[i];
        let at = theirs.partition_point(|&(b, _)| b < a.saturating_sub(gap / 2));
        for &(b, j) in &theirs[at.saturating_sub(1)..(at + 1).min(theirs.len())] {
            let d = a.saturating_sub(b);
            if b >= a || d >= gap {
                continue;
            }
            if best.is_none_or(|(bd, ..)| gap.abs_diff(2 * d) < gap.abs_diff(2 * bd)) {
                best = Some((d, k, j));
            }
        }
    }
    best
}

/// What [`row_sizes`] measures of each row's text.
pub type Measure<'a> = &'a (dyn Fn(&str) -> std::result::Result<u32, String> + Sync);

/// `measure` of the text of every row of every dataset (its text bytes, or its tokens), in
/// stored order (shard by shard), read from dataset i's field `text_fields[i]` on `threads`
/// threads. A bad record counts 0 (the run meets it as it would anyway); a fatal read error or
/// a failed measure is an error naming the dataset and row.
pub fn row_sizes(datasets: &Datasets, text_fields: &[&str], measure: Measure, threads: usize) -> Result<Vec<Vec<u32>>> {
    let manifests = datasets.manifests();
    if text_fields.len() != manifests.len() {
        return Err(Error::Config(format!(
            "row sizes need one text field per dataset: {} datasets, {} fields",
            manifests.len(),
            text_fields.len()
        )));
    }
    // Work in runs of up to 1024 rows of one shard (one read each), taken in turn by threads.
    const RUN: u64 = 1024;
    let mut runs: Vec<(usize, u32, u64, u64, usize)> = Vec::new();
    for (d, m) in manifests.iter().enumerate() {
        let mut at = 0usize;
        for (s, shard) in m.shards.iter().enumerate() {
            for row in (0..shard.rows).step_by(RUN as usize) {
                let end = (row + RUN).min(shard.rows);
                runs.push((d, s as u32, row, end, at));
                at += (end - row) as usize;
            }
        }
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    // Per thread: (dataset, first row index, sizes) of each run it measured.
    type Measured = Result<Vec<(usize, usize, Vec<u32>)>>;
    let measured: Vec<Measured> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    let mut ids = Vec::with_capacity(RUN as usize);
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(d, shard, row, end, at)) = runs.get(i) else { return Ok(out) };
                        let fail = |id: &SampleId, m: String| Error::Estimate {
                            dataset: manifests[d].name.clone(),
                            message: format!("measuring row sizes, {id}: {m}"),
                        };
                        ids.clear();
                        ids.extend((row..end).map(|r| SampleId::new(d as u32, shard, r)));
                        let mut sizes = Vec::with_capacity(ids.len());
                        for (id, r) in ids.iter().zip(datasets.read(&ids)) {
                            sizes.push(match r {
                                Ok(rec) => match rec.str(text_fields[d]) {
                                    Some(t) => measure(t).map_err(|m| fail(id, m))?,
                                    None => 0,
                                },
                                Err(OpError::Data(_)) => 0,
                                Err(OpError::Fatal(m)) => return Err(fail(id, m)),
                            });
                        }
                        out.push((d, at, sizes));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::Config("a row-size thread panicked".into()))))
            .collect()
    });
    let mut sizes: Vec<Vec<u32>> = manifests.iter().map(|m| vec![0; m.rows() as usize]).collect();
    for part in measured {
        for (d, at, run) in part? {
            sizes[d][at..at + run.len()].copy_from_slice(&run);
        }
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan for `lanes` lanes over documents of `tokens` tokens, in chunks of `chunk`
    /// documents dealt round-robin.
    fn plan_over(lanes: u32, chunk: usize, tokens: &[u64]) -> TailPlan {
        let ids: Vec<SampleId> = (0..tokens.len() as u64).map(|p| SampleId::new(0, 0, p)).collect();
        let chunk_tokens: Vec<u64> = tokens.chunks(chunk).map(|c| c.iter().sum()).collect();
        let from = |g: u64| g as usize * chunk;
        plan(
            lanes,
            &chunk_tokens,
            |lane, n| n * u64::from(lanes) + u64::from(lane),
            |g| (ids[from(g)..].to_vec(), tokens[from(g)..].to_vec()),
            &[],
        )
    }

    /// Lanes that drew very different chunks end equal after the re-cut, and nothing before the
    /// re-cut block moves.
    #[test]
    fn the_recut_tops_every_lane_up_to_the_same_total() {
        // 4 lanes, 6 blocks of 4 chunks of 10 positions; lane 0 always draws the long chunk.
        let pos_tokens: Vec<u64> = (0..240u64).map(|p| if (p / 10) % 4 == 0 { 50 + p % 7 } else { 5 }).collect();
        let p = plan_over(4, 10, &pos_tokens);
        assert!(p.block < 5, "{p:?}");
        assert_eq!(p.pieces.len(), 4);
        let (min, max) = p.spread;
        assert!(max - min <= 5, "{p:?}");
        let total: u64 = pos_tokens.iter().sum();
        assert!(min * 4 <= total && total <= max * 4);
        // Every position of the stretch goes to one lane, each lane's in stream order.
        let mut all: Vec<u64> = p.pieces.iter().flatten().map(|s| s.row).collect();
        assert!(p.pieces.iter().all(|piece| piece.windows(2).all(|w| w[0].row < w[1].row)));
        all.sort_unstable();
        assert_eq!(all, (p.block * 40..240).collect::<Vec<_>>());
    }

    /// The same at 1,024 lanes with 4 documents a lane: bounded work (moves try the 8 lightest
    /// and heaviest lanes, not every pair), every document once. Lanes end ~550 tokens apart,
    /// as largest first leaves them here (many lanes give it many choices); against a step of
    /// 1,024 lanes that is a fraction of one.
    #[test]
    fn many_lanes_of_long_documents_are_evened_out_too() {
        let tokens = long_documents(4 * 1024);
        let p = plan_over(1024, 4, &tokens);
        let (min, max) = p.spread;
        assert!(max - min <= 2_000, "lanes end {} tokens apart", max - min);
        let placed: usize = p.pieces.iter().map(Vec::len).sum();
        assert_eq!(placed as u64, tokens.len() as u64 - p.block * 4 * 1024);
    }

    /// `n` documents of 11,000–30,000 tokens (pages of a manual), deterministic.
    fn long_documents(n: usize) -> Vec<u64> {
        let mut x = 7u64;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                11_000 + (x >> 33) % 19_000
            })
            .collect()
    }

    /// Only long documents left (sizes 11,000–30,000, as pages of a manual): largest first
    /// leaves the lanes thousands of tokens apart; moves and swaps bring them within a few.
    #[test]
    fn long_documents_alone_still_end_within_a_few_tokens() {
        let lanes = 8u32;
        let tokens = long_documents(160);
        // 20 chunks of 8 documents.
        let p = plan_over(lanes, 8, &tokens);
        let (min, max) = p.spread;
        assert!(max - min <= 64, "lanes end {} tokens apart: {p:?}", max - min);
        let mut all: Vec<u64> = p.pieces.iter().flatten().map(|s| s.row).collect();
        all.sort_unstable();
        assert_eq!(all, (p.block * 64..160).collect::<Vec<_>>(), "every document once");
        let load = |piece: &Vec<SampleId>| piece.iter().map(|s| tokens[s.row as usize]).sum::<u64>();
        let before: u64 = (0..p.block * 64).map(|i| tokens[i as usize]).sum();
        assert_eq!(p.pieces.iter().map(load).sum::<u64>() + before, tokens.iter().sum::<u64>());
    }
}
