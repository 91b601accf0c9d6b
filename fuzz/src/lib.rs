//! What the fuzz targets share: a small real pipeline (byte tokens, best-fit packing, a
//! shuffle) and a checkpoint of it, so that mutated checkpoint bodies reach decoding and
//! restore instead of stopping at the checksum.

use std::path::Path;
use std::sync::OnceLock;

use zephon_core::*;
use zephon_pack::{Algorithm, Pack, PackConfig};
use zephon_testkit::{ByteTokenize, ShuffleBuffer, corpus, opts, spec};

/// Lanes and rows of the fuzzed run.
pub const LANES: u32 = 4;
/// Rows per global step.
pub const ROWS: u32 = 8;

/// The fuzzed run.
pub fn run_spec() -> RunSpec {
    let pack = Pack::new(PackConfig { max_segments: 6, ..PackConfig::new(Algorithm::BestFit { bins: 3 }, 48) })
        .expect("valid settings");
    let ops = Operators::new().then(ByteTokenize).then(pack).then(ShuffleBuffer { size: 3 });
    spec(corpus(200, 30, 9), ops, 4, 1000, Tail::Drop)
}

/// The run's fingerprint.
pub fn fingerprint() -> &'static RunFingerprint {
    static F: OnceLock<RunFingerprint> = OnceLock::new();
    F.get_or_init(|| run_spec().fingerprint(&Topology::single(LANES, ROWS).expect("valid topology")))
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
        .map(|r| Engine::start(run_spec(), Topology::new(LANES, ROWS, 2, r).expect("valid"), opts(1, 2, 1)).expect("starts"))
        .collect();
    for e in &mut engines {
        for _ in 0..3 {
            e.next_step().expect("runs").expect("repeats");
        }
        e.checkpoint(dir).expect("writes");
    }
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
