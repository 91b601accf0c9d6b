//! What the fuzz targets share: a small real pipeline (byte tokens over two datasets steered
//! by each lane's delivered tokens, ensure_mixture, best-fit packing, a shuffle) and a
//! checkpoint of it, so that mutated
//! checkpoint bodies reach decoding and restore (every accumulator's state, held documents
//! included) instead of stopping at the checksum.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use zephon_core::*;
use zephon_operator::*;
use zephon_mix::{EnsureMixture, Exhaustion, SourceOptions, SteeredSource};
use zephon_pack::{Algorithm, Pack, PackOptions};
use zephon_testkit::{ByteTokenize, ShuffleBuffer, opts, spec};

/// Lanes and rows of the fuzzed run.
pub const LANES: u32 = 4;
/// Rows per global step.
pub const ROWS: u32 = 8;

/// Two datasets: short documents (1–3 words) and long ones (10–40 words), in three shards each.
fn datasets() -> Datasets {
    const WORDS: [&str; 8] = ["lane", "step", "seed", "rank", "pack", "row", "token", "shard"];
    let dataset = |name: &str, docs: u64, words: (u64, u64)| {
        let key = RngKey::new(9, name);
        let texts: Vec<String> = (0..docs)
            .map(|d| {
                let n = words.0 + key.with(d).below_at(0, words.1 - words.0 + 1);
                (0..n).map(|w| WORDS[key.with(d).below_at(w + 1, 8) as usize]).collect::<Vec<_>>().join(" ")
            })
            .collect();
        let shards = texts.chunks(docs.div_ceil(3) as usize).map(|c| c.to_vec()).collect();
        Arc::new(MemoryDataset::from_texts(name, "text", shards)) as Arc<dyn Dataset>
    };
    Datasets::new(vec![dataset("short", 300, (1, 3)), dataset("long", 60, (10, 40))])
}

/// The fuzzed run. ensure_mixture's slack is small next to the long documents, so after a
/// few steps its lanes hold documents (and their lineage is in the checkpoint).
pub fn run_spec() -> RunSpec {
    let pack = Pack::new(PackOptions { max_segments: 6, ..PackOptions::new(Algorithm::BestFit { bins: 3 }, 48) })
        .expect("valid settings");
    let ensure = EnsureMixture::new(&[0.5, 0.5], 24)
        .and_then(|e| e.hold(6))
        .expect("valid settings")
        .standing_stock(pack.holds_positions());
    let ops = Operators::new().then(ByteTokenize).then(ensure).then(pack).then(ShuffleBuffer { size: 3 });
    // Steered by each lane's delivered tokens, so the lanes' states carry the closed loop and
    // their lineage is named per dataset stream.
    let datasets = datasets();
    let config =
        SourceOptions { seed: 4, chunk_tokens: Some(40), exhaustion: Exhaustion::Repeat, ..Default::default() };
    let source =
        SteeredSource::new(&datasets.manifests(), &[0.5, 0.5], config, &[12.0, 125.0], None).expect("valid mixture");
    RunSpec { source: Arc::new(source), ..spec(datasets, ops, 4, 1000, Tail::Drop) }
}

/// The run's fingerprint.
pub fn fingerprint() -> &'static RunFingerprint {
    static F: OnceLock<RunFingerprint> = OnceLock::new();
    F.get_or_init(|| {
        run_spec().fingerprint(&Topology::builder().lanes(LANES).rows_per_step(ROWS).build().expect("valid topology"))
    })
}

/// A checkpoint file: the header (magic, format, length, SHA-256) around `raw`, the body
/// before compression ("JSON length" line, JSON, coded lineage).
pub fn file_bytes(raw: &[u8]) -> Vec<u8> {
    let body = miniz_oxide::deflate::compress_to_vec(raw, 1);
    let body = body.as_slice();
    let mut out = format!(
        "ZEPHON-CHECKPOINT\nformat {}\nlength {}\nsha256 {}\n",
        checkpoint::FORMAT_VERSION,
        body.len(),
        Digest::of(body).to_hex()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Writes checkpoints of the run after 3 steps at world size 2 into `dir` (one file a rank).
pub fn write_checkpoint(dir: &Path) {
    let mut engines: Vec<Engine> = (0..2)
        .map(|r| {
            Engine::start(
                run_spec(),
                Topology::builder()
                    .lanes(LANES)
                    .rows_per_step(ROWS)
                    .place(Place { rank: r, world_size: 2 })
                    .build()
                    .expect("valid"),
                opts(1, 2, 1),
            )
            .expect("starts")
        })
        .collect();
    let mut held = 0;
    for e in &mut engines {
        for _ in 0..3 {
            e.next_step().expect("runs").expect("repeats");
        }
        held += e.lane_states().iter().map(|l| l.accumulators[0].buffered.len()).sum::<usize>();
        e.checkpoint(dir).expect("writes");
    }
    assert!(held > 0, "the seed checkpoints hold ensure_mixture documents, so restore fuzzes their import");
}

/// The body (after the header) of a checkpoint file, inflated.
pub fn body_of(file: &[u8]) -> Vec<u8> {
    let mut at = 0;
    for _ in 0..4 {
        match file[at..].iter().position(|&b| b == b'\n') {
            Some(i) => at += i + 1,
            None => return Vec::new(),
        }
    }
    miniz_oxide::inflate::decompress_to_vec(&file[at..]).unwrap_or_default()
}

/// Splits an inflated body into its JSON and its coded lineage.
pub fn split_body(raw: &[u8]) -> Option<(&[u8], &[u8])> {
    let nl = raw.iter().position(|&b| b == b'\n')?;
    let n: usize = std::str::from_utf8(&raw[..nl]).ok()?.parse().ok()?;
    let rest = &raw[nl + 1..];
    (n <= rest.len()).then(|| rest.split_at(n))
}
