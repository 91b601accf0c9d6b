//! The elastic-determinism invariants (DESIGN.md §2) as properties over random topologies,
//! thread counts, unit sizes, prefetch depths, microbatch sizes and resume points.

use std::collections::BTreeMap;

use proptest::prelude::*;
use zephon_core::*;
use zephon_operator::*;

use crate::common::*;

fn divisors(n: u32) -> Vec<u32> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

/// (L, R, W) with W dividing L.
fn topo() -> impl Strategy<Value = (u32, u32, u32)> {
    (prop::sample::select(vec![1u32, 2, 3, 4, 6, 8, 16]), 1u32..4)
        .prop_flat_map(|(l, r)| (Just(l), Just(r), prop::sample::select(divisors(l))))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Invariant 1: every global step is the same for any W dividing L, thread count,
    /// prefetch depth, unit size and microbatch size (and its digests, whether the workers
    /// or the consumer make them).
    #[test]
    fn steps_do_not_depend_on_world_size_threads_or_microbatches(
        (lanes, r, w) in topo(),
        threads in 1usize..4,
        unit in 1usize..9,
        prefetch in 1u64..4,
        shuffle in prop::sample::select(vec![0usize, 5]),
        mb_pick in 0usize..8,
        digests_by_workers in any::<bool>(),
    ) {
        let g = lanes * r;
        let spec = spec(corpus(300, 40, 1), operators(64, shuffle), 7, 1000, Tail::Drop);
        let reference = run_ranks(&spec, lanes, g, 1, opts(1, 4, 1), 6, None, None);
        prop_assert_eq!(reference.len(), 6);
        let exec = ExecOptions { digests_by_workers, ..opts(threads, unit, prefetch) };
        let got = run_ranks(&spec, lanes, g, w, exec, 6, None, None);
        prop_assert_eq!(&got, &reference);

        // Microbatches are views: re-stacking them gives the local step's rows and digests.
        let t = Topology::builder().lanes(lanes).rows_per_step(g).place(Place { rank: 0, world_size: w }).build().unwrap();
        let mut e = Engine::start(spec.clone(), t.clone(), opts(threads, unit, prefetch)).unwrap();
        let step = e.next_step().unwrap().unwrap();
        let local = t.local_rows_at(0) as usize;
        let sizes = divisors(local as u32);
        let mb = sizes[mb_pick % sizes.len()] as usize;
        let rows: Vec<&Record> = step.microbatches(mb).unwrap().iter().flat_map(|m| m.rows().to_vec()).collect();
        let direct: Vec<&Record> = step.rows().collect();
        prop_assert_eq!(rows, direct);
    }

    /// Invariant 2: checkpoints at random steps, restored at random other world sizes,
    /// several times in a row, continue exactly as the uninterrupted run.
    #[test]
    fn resumes_at_other_world_sizes_continue_the_same_run(
        (lanes, r, _) in topo(),
        segments in prop::collection::vec((0usize..8, 0u64..4, 1usize..3), 1..4),
        shuffle in prop::sample::select(vec![0usize, 7]),
    ) {
        let g = lanes * r;
        let spec = spec(corpus(300, 40, 2), operators(48, shuffle), 5, 1000, Tail::Drop);
        let total: u64 = segments.iter().map(|s| s.1).sum::<u64>() + 2;
        let reference = run_ranks(&spec, lanes, g, 1, opts(1, 4, 1), total, None, None);
        let ws = divisors(lanes);
        let tmp = tempfile::tempdir().unwrap();
        let mut got = Vec::new();
        let mut resume: Option<std::path::PathBuf> = None;
        for (i, (wpick, steps, threads)) in segments.iter().enumerate() {
            let w = ws[wpick % ws.len()];
            let save = tmp.path().join(format!("ckpt-{i}"));
            got.extend(run_ranks(&spec, lanes, g, w, opts(*threads, 3, 2), *steps, resume.as_deref(), Some(&save)));
            resume = Some(save);
        }
        let w = ws[segments.len() % ws.len()];
        got.extend(run_ranks(&spec, lanes, g, w, opts(2, 5, 2), 2, resume.as_deref(), None));
        prop_assert_eq!(got, reference);
    }

    /// Invariant 3: over a finite dataset every token of every sample is delivered exactly
    /// `epochs` times, across resumes at other world sizes.
    #[test]
    fn every_sample_is_delivered_exactly_once_per_epoch(
        (lanes, r, w) in topo(),
        epochs in 1u64..3,
        resume_at in 0u64..6,
        w2pick in 0usize..8,
        shuffle in prop::sample::select(vec![0usize, 3]),
    ) {
        let g = lanes * r;
        let datasets = corpus(120, 30, 3);
        let spec = spec(datasets.clone(), operators(40, shuffle), 4, epochs, Tail::Partial);
        let mut coverage: BTreeMap<SampleId, Vec<(u32, u32)>> = BTreeMap::new();
        let tmp = tempfile::tempdir().unwrap();
        let mut record = |step: &LocalStep| {
            for row in step.rows() {
                for f in row.lineage().fragments() {
                    let p = f.positions().expect("rows hold token ranges");
                    coverage.entry(f.sample).or_default().push((p.start(), p.end()));
                }
            }
        };
        // First part at world size w, every rank in turn, then a checkpoint.
        let mut engines: Vec<Engine> = (0..w)
            .map(|rank| Engine::start(spec.clone(), Topology::builder().lanes(lanes).rows_per_step(g).place(Place { rank, world_size: w }).build().unwrap(), opts(2, 3, 2)).unwrap())
            .collect();
        let mut ended = false;
        for _ in 0..resume_at {
            let steps: Vec<_> = engines.iter_mut().map(|e| e.next_step().unwrap()).collect();
            if steps.iter().all(|s| s.is_none()) { ended = true; break; }
            steps.iter().flatten().for_each(&mut record);
        }
        for e in &engines { e.checkpoint(tmp.path()).unwrap(); }
        drop(engines);
        if !ended {
            let ws = divisors(lanes);
            let w2 = ws[w2pick % ws.len()];
            let mut engines: Vec<Engine> = (0..w2)
                .map(|rank| Engine::restore(spec.clone(), Topology::builder().lanes(lanes).rows_per_step(g).place(Place { rank, world_size: w2 }).build().unwrap(), opts(2, 2, 1), tmp.path()).unwrap())
                .collect();
            loop {
                let steps: Vec<_> = engines.iter_mut().map(|e| e.next_step().unwrap()).collect();
                if steps.iter().all(|s| s.is_none()) { break; }
                steps.iter().flatten().for_each(&mut record);
            }
        }
        // Every sample's token range [0, n) is covered exactly `epochs` times.
        let manifest = &datasets.manifests()[0];
        let all: Vec<SampleId> = manifest.shards.iter().enumerate()
            .flat_map(|(s, sh)| (0..sh.rows).map(move |row| SampleId::new(0, s as u32, row)))
            .collect();
        prop_assert_eq!(coverage.len(), all.len(), "samples never delivered");
        for id in all {
            let n = datasets.read(&[id]).remove(0).unwrap().str("text").unwrap().len() as u32 + 1;
            let mut depth = vec![0u64; n as usize];
            for &(a, b) in &coverage[&id] {
                for d in &mut depth[a as usize..b as usize] { *d += 1; }
            }
            prop_assert!(depth.iter().all(|&d| d == epochs), "{}: coverage {:?}", id, coverage[&id]);
        }
    }
}
