//! A run over datasets in an S3 server (moto, on loopback) gives the steps of the same run
//! over the files on disk, at every world size and across a resume; the report counts what
//! was fetched.

use std::path::Path;

use zephon_testkit::{S3Server, SpecText};

use crate::*;

/// Corpora A (JSONL) and B (Parquet), 50 / 50 by tokens, best-fit rows of 512, at `a` and `b`,
/// from the store at `endpoint`; `more` adds settings.
pub(crate) fn spec_at(
    a: &str,
    b: &str,
    cache: &Path,
    endpoint: &str,
    more: impl FnOnce(SpecText) -> SpecText,
) -> zephon::Spec {
    let data = zephon_testkit::testdata();
    let text = SpecText::new(4, 8)
        .seed(11)
        .dataset("a", a)
        .share(0.5)
        .dataset("b", b)
        .share(0.5)
        .tokenizer(data.join("tokenizers/gpt2/tokenizer.json"), "<|endoftext|>")
        .set("ensure_mixture", "slack_tokens", 2048u64)
        .pack("best_fit", 512)
        .set("pack", "pad_id", 50256u64)
        .shuffle(4)
        .threads(2)
        .set("storage", "endpoint", endpoint)
        .set("storage", "allow_http", true)
        .set("storage", "path_style", true)
        .set("storage", "block_bytes", 1u64 << 20)
        .set("storage", "cache_dir", cache);
    parse(&more(text).text())
}

fn spec(a: &str, b: &str, cache: &Path, server: &S3Server) -> zephon::Spec {
    spec_at(a, b, cache, &server.endpoint(), |t| t)
}

/// A server holding corpora A and B under `s3://corpora/a/jsonl` and `s3://corpora/b/parquet`.
pub(crate) fn server_with_corpora() -> Option<S3Server> {
    let server = S3Server::start()?;
    server.set_env();
    let data = zephon_testkit::testdata();
    server.create_bucket("corpora");
    server.upload(&data.join("corpora/a/jsonl"), "corpora", "a/jsonl");
    server.upload(&data.join("corpora/b/parquet"), "corpora", "b/parquet");
    Some(server)
}

#[test]
fn a_run_from_s3_is_the_run_from_disk_at_every_world_size_and_across_a_resume() {
    let Some(server) = server_with_corpora() else { return };
    let data = zephon_testkit::testdata();
    let dir = tmp();
    let cache = dir.path().join("blocks");
    let local = spec(
        &data.join("corpora/a/jsonl").to_string_lossy(),
        &data.join("corpora/b/parquet").to_string_lossy(),
        &cache,
        &server,
    );
    let remote = spec("s3://corpora/a/jsonl", "s3://corpora/b/parquet", &cache, &server);
    let steps = 10;
    let reference = loaders(&local, 1, 2, None).steps_exactly(steps, zephon::testing::fingerprint).unwrap();
    for w in [1, 2, 4] {
        let got = loaders(&remote, w, 1, None).steps_exactly(steps, zephon::testing::fingerprint).unwrap();
        assert_eq!(got, reference, "W = {w}");
    }
    let ckpt = dir.path().join("ckpt");
    let mut first = loaders(&remote, 2, 1, None);
    let head = first.steps_exactly(4, zephon::testing::fingerprint).unwrap();
    first.checkpoint(&ckpt).unwrap();
    let tail = loaders(&remote, 4, 1, Some(&ckpt)).steps_exactly(steps - 4, zephon::testing::fingerprint).unwrap();
    assert_eq!([head, tail].concat(), reference, "a resume 2 → 4 from S3");

    // The report says what came from the store, per dataset.
    let mut loader = remote.pipeline().unwrap().build(remote.topology(1, 0).unwrap()).unwrap();
    loader.next_step().unwrap();
    for d in loader.report().datasets {
        assert!(d.requests > 0 && d.cache_hits + d.cache_misses > 0, "{d:?}");
    }
}
