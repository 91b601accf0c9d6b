//! Token shares held by each lane's closed loop, on the real corpora at default settings:
//! nothing tokenized is dropped, every document arrives whole, and at every step each
//! dataset's cumulative share of the rows is within L × (slack + seq_len) tokens of its target.
//! Two mixtures: long documents of corpus B against one-line documents, 30 / 70 (the mixture of
//! `benches/mixture_edges.sh`), and corpora A and B, 50 / 50. `benches/mixture_edges.sh`
//! (`PARTS=5`) runs the same over 3,000 steps.

use std::collections::BTreeMap;
use std::path::Path;

use zephon::operator::{Lineage, SampleId};
use zephon_testkit::SpecText;

use crate::*;

const SLACK: u64 = 4096;

/// A mixture at `lanes` lanes and `rows` rows of `seq_len` a step, best-fit (64 open rows a
/// lane, at most 4,096 for the run), a shuffle of at least 64 rows split across the lanes,
/// everything else at its default.
fn spec(long: &Path, short: &Path, shares: [f64; 2], lanes: u32, rows: u32, seq_len: u64) -> String {
    let data = zephon_testkit::testdata();
    SpecText::new(lanes, rows)
        .seed(21)
        .dataset("long", long)
        .share(shares[0])
        .dataset("short", short)
        .share(shares[1])
        .tokenizer(data.join("tokenizers/gpt2/tokenizer.json"), "<|endoftext|>")
        .set("ensure_mixture", "slack_tokens", SLACK)
        .pack("best_fit", seq_len)
        .set("pack", "bins_total", (64 * lanes).min(4096))
        .set("pack", "pad_id", 50256)
        .set("shuffle", "buffer_total", 64.max(lanes))
        .threads(2)
        .text()
}

/// Every delivered or held piece (token span) of each document.
type Pieces = BTreeMap<SampleId, Vec<(u32, u32)>>;

/// What `steps` steps at one rank deliver: the worst excess of a dataset over its share after
/// any step (and that step), and every delivered or held piece per document.
fn run(text: &str, shares: [f64; 2], steps: u64) -> (f64, usize, Pieces, zephon::DataReport) {
    let spec = parse(text);
    let mut loader = spec.pipeline().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
    let mut tokens = [0u64; 2];
    let (mut worst, mut worst_at) = (0.0f64, 0);
    let mut pieces = Pieces::new();
    let mut add = |l: &Lineage, tokens: &mut [u64; 2]| {
        for f in l.fragments() {
            let span = f.positions().expect("token spans");
            tokens[f.sample.dataset as usize] += u64::from(span.len());
            pieces.entry(f.sample).or_default().push((span.start(), span.end()));
        }
    };
    for s in 0..steps {
        let step = loader.next_step().unwrap().expect("the data repeats");
        for row in step.rows() {
            add(row.lineage(), &mut tokens);
        }
        let total = (tokens[0] + tokens[1]) as f64;
        for d in 0..2 {
            let ahead = tokens[d] as f64 - shares[d] * total;
            if ahead > worst {
                (worst, worst_at) = (ahead, s as usize);
            }
        }
    }
    let mut held = [0u64; 2];
    for l in loader.in_flight() {
        add(&l, &mut held);
    }
    (worst, worst_at, pieces, loader.report())
}

/// Every document read so far is whole: each of its pieces follows the piece before it (no
/// hole), no two pieces overlap, and every read of it begins at its first token. A document
/// can be read more than once (a repeating dataset comes round again after a pass), and the
/// last pieces of one a lane is still inside are not made yet.
fn assert_whole(pieces: BTreeMap<SampleId, Vec<(u32, u32)>>, what: &str) {
    for (doc, spans) in pieces {
        let (mut starting, mut ending, mut end_of) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        for &(a, b) in &spans {
            *starting.entry(a).or_insert(0usize) += 1;
            *ending.entry(b).or_insert(0usize) += 1;
            let end = *end_of.entry(a).or_insert(b);
            assert_eq!(end, b, "{what}: {doc}: pieces {a}..{b} and {a}..{end} overlap");
        }
        let reads = starting.get(&0).copied().unwrap_or(0);
        for (&a, &n) in &starting {
            assert!(n <= reads, "{what}: {doc}: piece at {a} came {n} times, the document began {reads} times");
            if a > 0 {
                let before = ending.get(&a).copied().unwrap_or(0);
                assert!(
                    before >= n,
                    "{what}: {doc}: a hole before token {a} ({n} pieces start there, {before} end there)"
                );
            }
        }
    }
}

#[test]
fn the_closed_loop_drops_nothing_keeps_documents_whole_and_holds_the_bound() {
    let dir = tmp();
    let data = zephon_testkit::testdata();
    let one_line = one_line_documents(dir.path(), 20..200, 200_000);
    let b = data.join("corpora/b/parquet");
    let a = data.join("corpora/a/jsonl");
    let mut seen = Vec::new();
    for (name, long, short, shares) in
        [("B + one-line 30/70", &b, &one_line, [0.3, 0.7]), ("A + B 50/50", &b, &a, [0.5, 0.5])]
    {
        for (lanes, rows, seq_len, steps) in [(8, 16, 1024, 400), (64, 64, 1024, 60), (1024, 1024, 256, 16)] {
            let what = format!("{name}, L = {lanes}");
            let (worst, at, pieces, report) = run(&spec(long, short, shares, lanes, rows, seq_len), shares, steps);
            let bound = f64::from(lanes) * (SLACK + seq_len) as f64;
            seen.push(format!("{what}: worst {worst:.0} tokens ahead after step {at}, bound {bound}"));
            assert!(worst <= bound, "{}", seen.last().unwrap());
            for d in &report.datasets {
                assert_eq!((d.dropped_documents, d.dropped_tokens), (0, 0), "{what}: {} dropped", d.name);
                assert!(d.mixed_tokens > 0, "{what}: {} delivered nothing", d.name);
            }
            assert_whole(pieces, &what);
        }
    }
    println!("{}", seen.join("\n"));
}
