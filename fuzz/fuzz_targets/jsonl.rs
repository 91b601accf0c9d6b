//! Any bytes as a JSONL shard: open (index), then read every row, row by row and with the
//! shard held in memory. Errors name the row; never a panic; both ways read the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zephon_operator::SampleId;
use zephon_io::{DatasetOptions, Fields, open};

fuzz_target!(|data: &[u8]| {
    let Ok(dir) = tempfile::tempdir() else { return };
    let shard = dir.path().join("part.jsonl");
    if std::fs::write(&shard, data).is_err() {
        return;
    }
    let read_all = |held: usize| {
        let options = DatasetOptions {
            fields: Fields {
                text: Some("text".into()),
                extra: vec!["id".into()],
                // A field read as its JSON text (a conversation's messages), whatever it holds.
                json: vec!["messages".into()],
                allow_empty: false,
                max_row_bytes: Some(1 << 20),
                images: None,
            },
            cache_dir: Some(dir.path().join("cache")),
            parquet_cache_bytes: None,
            jsonl_held_bytes: Some(held),
            storage: Default::default(),
        };
        let ds = open("fuzz", &shard, &options).ok()?;
        let rows = ds.manifest().rows();
        let ids: Vec<SampleId> = (0..rows.min(10_000)).map(|r| SampleId::new(0, 0, r)).collect();
        let mut out = Vec::new();
        ds.read(&ids, &mut out);
        assert_eq!(out.len(), ids.len(), "one result per row asked for");
        Some(format!("{out:?}"))
    };
    assert_eq!(read_all(0), read_all(usize::MAX), "held and row by row read the same");
});
