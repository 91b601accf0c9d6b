//! Datasets laid out as users download them, made from the test corpora with the same names
//! and nesting: FineWeb (a folder per crawl), C4 (`.json.gz`, train and validation side by
//! side), Dolma (`documents/*.json.gz`), SlimPajama (`train/chunkN/*.jsonl.zst`) and a
//! `datasets` Parquet export (`data/train-*`, `data/validation-*`). Each loads; a nested
//! layout reads exactly as its files copied flat in the same order; splits are refused when
//! mixed and chosen with `split`; bad locations are clear errors naming the path.

use std::io::Write;
use std::path::{Path, PathBuf};

use zephon_testkit::SpecText;

use crate::*;

/// The corpus shard `part` of corpus `corpus` in `format` (`jsonl` or `parquet`).
fn part(corpus: &str, format: &str, part: usize) -> PathBuf {
    zephon_testkit::testdata().join(format!("corpora/{corpus}/{format}/part-{part:05}.{format}"))
}

fn put(root: &Path, relative: &str, bytes: &[u8]) {
    let p = root.join(relative);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn zst(bytes: &[u8]) -> Vec<u8> {
    zstd::stream::encode_all(bytes, 1).unwrap()
}

/// The first `n` lines of a JSONL corpus shard.
fn lines(corpus: &str, p: usize, n: usize) -> Vec<u8> {
    let text = std::fs::read_to_string(part(corpus, "jsonl", p)).unwrap();
    text.lines().take(n).map(|l| format!("{l}\n")).collect::<String>().into_bytes()
}

/// The Hub's extras beside the data: never read as shards.
fn hub_extras(root: &Path) {
    put(root, "README.md", b"---\nlicense: odc-by\n---\n# A dataset card\n");
    put(root, ".gitattributes", b"*.parquet filter=lfs diff=lfs merge=lfs -text\n");
    put(root, "dataset_info.json", b"{\"description\": \"not a shard\"}\n");
}

/// A spec reading `path` (a TOML value: a string or an array) with `split`, by sample weights
/// (no estimates), GPT-2, wrap rows of 256, 4 lanes.
fn spec(path: &str, split: Option<&str>) -> zephon::Spec {
    let data = zephon_testkit::testdata();
    let mut text = SpecText::new(4, 8)
        .seed(3)
        .dataset("web", "PLACEHOLDER")
        .weight(1.0)
        .tokenizer(data.join("tokenizers/gpt2/tokenizer.json"), "<|endoftext|>")
        .pack("wrap", 256)
        .threads(2)
        .text();
    text = text.replace("path = \"PLACEHOLDER\"", &format!("path = {path}"));
    if let Some(s) = split {
        text = text.replace("name = \"web\"", &format!("name = \"web\"\nsplit = \"{s}\""));
    }
    parse(&text)
}

fn quoted(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

/// Step fingerprints of `steps` steps, and the dataset's shard names in order.
fn run(spec: &zephon::Spec, steps: u64) -> (Vec<zephon::Digest>, Vec<String>) {
    let mut loader = spec.pipeline().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
    let names = loader.shard_names(0);
    let prints =
        (0..steps).map(|_| zephon::testing::fingerprint(&[loader.next_step().unwrap().expect("data")])).collect();
    (prints, names)
}

#[test]
fn five_downloaded_layouts_load_as_they_are() {
    let dir = tmp();
    let root = dir.path();
    // FineWeb: a folder per crawl, the shards inside.
    let fineweb = root.join("fineweb");
    hub_extras(&fineweb);
    for (crawl, p) in [("CC-MAIN-2024-10", 0), ("CC-MAIN-2024-18", 1)] {
        put(&fineweb, &format!("data/{crawl}/000_00000.parquet"), &std::fs::read(part("a", "parquet", p)).unwrap());
    }
    // C4: train and validation side by side, gzipped JSON Lines named .json.gz.
    let c4 = root.join("c4");
    for (name, p) in [("en/c4-train.00000-of-00002.json.gz", 0), ("en/c4-train.00001-of-00002.json.gz", 1)] {
        put(&c4, name, &gz(&lines("a", p, 300)));
    }
    put(&c4, "en/c4-validation.00000-of-00001.json.gz", &gz(&lines("a", 2, 100)));
    // Dolma: documents/*.json.gz.
    let dolma = root.join("dolma");
    for i in 0..3 {
        put(&dolma, &format!("documents/v1_5-sample-{i:04}.json.gz"), &gz(&lines("b", i, 40)));
    }
    // SlimPajama: train/chunkN/example_train_K.jsonl.zst, a validation folder beside.
    let slim = root.join("slimpajama");
    for (c, k) in [(1, 0), (1, 1), (2, 0)] {
        put(&slim, &format!("train/chunk{c}/example_train_{k}.jsonl.zst"), &zst(&lines("a", c + k, 200)));
    }
    put(&slim, "validation/chunk1/example_holdout_0.jsonl.zst", &zst(&lines("a", 3, 50)));
    // A `datasets` Parquet export.
    let export = root.join("export");
    hub_extras(&export);
    put(&export, "data/train-00000-of-00002.parquet", &std::fs::read(part("b", "parquet", 0)).unwrap());
    put(&export, "data/train-00001-of-00002.parquet", &std::fs::read(part("b", "parquet", 1)).unwrap());
    put(&export, "data/validation-00000-of-00001.parquet", &std::fs::read(part("b", "parquet", 2)).unwrap());

    for (what, path, split, want) in [
        (
            "FineWeb, the folder",
            quoted(&fineweb),
            None,
            vec!["data/CC-MAIN-2024-10/000_00000.parquet", "data/CC-MAIN-2024-18/000_00000.parquet"],
        ),
        (
            "FineWeb, a glob",
            quoted(&fineweb.join("data/CC-MAIN-*/*.parquet")),
            None,
            vec!["CC-MAIN-2024-10/000_00000.parquet", "CC-MAIN-2024-18/000_00000.parquet"],
        ),
        (
            "C4, train",
            quoted(&c4),
            Some("train"),
            vec!["en/c4-train.00000-of-00002.json.gz", "en/c4-train.00001-of-00002.json.gz"],
        ),
        (
            "Dolma",
            quoted(&dolma.join("documents/*.json.gz")),
            None,
            vec!["v1_5-sample-0000.json.gz", "v1_5-sample-0001.json.gz", "v1_5-sample-0002.json.gz"],
        ),
        (
            "SlimPajama, train",
            quoted(&slim),
            Some("train"),
            vec![
                "train/chunk1/example_train_0.jsonl.zst",
                "train/chunk1/example_train_1.jsonl.zst",
                "train/chunk2/example_train_0.jsonl.zst",
            ],
        ),
        (
            "SlimPajama, two folders",
            format!("[{}, {}]", quoted(&slim.join("train/chunk2")), quoted(&slim.join("train/chunk1"))),
            None,
            vec!["example_train_0.jsonl.zst", "example_train_0.jsonl.zst", "example_train_1.jsonl.zst"],
        ),
        (
            "the export, train",
            quoted(&export),
            Some("train"),
            vec!["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"],
        ),
    ] {
        let (prints, names) = run(&spec(&path, split), 3);
        assert_eq!(names, want, "{what}");
        assert_eq!(prints.len(), 3, "{what}");
        let explained =
            spec(&path, split).pipeline().unwrap().explain(&spec(&path, split).topology(1, 0).unwrap()).unwrap();
        let listed: usize = explained
            .lines()
            .filter_map(|l| l.trim().strip_prefix("files: ")?.split(' ').next()?.parse::<usize>().ok())
            .sum();
        assert_eq!(listed, want.len(), "{what}: {explained}");
    }
}

#[test]
fn a_nested_layout_reads_as_its_files_copied_flat_in_the_same_order() {
    let dir = tmp();
    let (nested, flat) = (dir.path().join("nested"), dir.path().join("flat"));
    let files = [
        "train/chunk1/example_train_0.jsonl.zst",
        "train/chunk1/example_train_1.jsonl.zst",
        "train/chunk2/example_train_0.jsonl.zst",
    ];
    for (i, name) in files.iter().enumerate() {
        let bytes = zst(&lines("a", i, 400));
        put(&nested, name, &bytes);
        put(&flat, &format!("{i:02}-{}", name.rsplit('/').next().unwrap()), &bytes);
    }
    let (a, names) = run(&spec(&quoted(&nested), None), 12);
    let (b, _) = run(&spec(&quoted(&flat), None), 12);
    assert_eq!(names, files);
    assert_eq!(a, b, "the same steps, step by step");
}

#[test]
fn train_and_validation_in_one_folder_are_refused_until_a_split_is_chosen() {
    let dir = tmp();
    let root = dir.path().join("c4");
    for p in 0..2 {
        put(&root, &format!("en/c4-train.{p:05}-of-00002.json.gz"), &gz(&lines("a", p, 200)));
    }
    put(&root, "en/c4-validation.00000-of-00001.json.gz", &gz(&lines("a", 2, 60)));
    let err = spec(&quoted(&root), None)
        .pipeline()
        .unwrap()
        .build(spec(&quoted(&root), None).topology(1, 0).unwrap())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("more than one split") && err.contains("c4-train.00000") && err.contains("c4-validation"),
        "{err}"
    );
    assert!(err.contains("split = \"train\""), "{err}");
    let err = spec(&quoted(&root), Some("trian")).pipeline().err().unwrap().to_string();
    assert!(err.contains("\"trian\" is not train, validation or test"), "{err}");

    // The training pass reads the train files, the validation pass the validation file: each
    // file exactly once between them.
    let data = zephon_testkit::testdata();
    let text = SpecText::new(2, 4)
        .seed(5)
        .dataset("c4", &root)
        .dataset_key("split", "train")
        .weight(1.0)
        .tokenizer(data.join("tokenizers/gpt2/tokenizer.json"), "<|endoftext|>")
        .pack("wrap", 256)
        .threads(2)
        .append(&format!(
            "[validation]\nrows_per_step = 4\n\n[[validation.dataset]]\nname = \"c4\"\npath = {}\nsplit = \"validation\"\n",
            quoted(&root)
        ))
        .text();
    let spec = parse(&text);
    let train = spec.pipeline().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
    let validation = spec.validation().unwrap().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
    let mut seen = train.shard_names(0);
    seen.extend(validation.shard_names(0));
    assert_eq!(
        seen,
        [
            "en/c4-train.00000-of-00002.json.gz",
            "en/c4-train.00001-of-00002.json.gz",
            "en/c4-validation.00000-of-00001.json.gz"
        ]
    );
    let rows = validation.records();
    assert_eq!(rows, 60, "the validation pass reads the validation file's rows");
}

#[test]
fn bad_locations_are_clear_errors_naming_the_path() {
    let dir = tmp();
    let root = dir.path();
    let build = |path: &str| {
        let s = spec(path, None);
        s.pipeline().and_then(|p| p.build(s.topology(1, 0).unwrap())).err().map(|e| e.to_string()).unwrap_or_default()
    };
    put(root, "data/part-0.jsonl", &lines("a", 0, 20));
    let err = build(&quoted(&root.join("data/*.parquet")));
    assert!(err.contains("the glob matches no file") && err.contains("data/*.parquet"), "{err}");
    let err = build(&quoted(&root.join("missing/*.jsonl")));
    assert!(err.contains("does not exist") && err.contains("missing"), "{err}");
    std::os::unix::fs::symlink(root.join("gone.jsonl"), root.join("data/part-1.jsonl")).unwrap();
    let err = build(&quoted(&root.join("data")));
    assert!(err.contains("part-1.jsonl") && err.contains("broken link"), "{err}");
    let err = build(&quoted(&root.join("data/part-1.jsonl")));
    assert!(err.contains("part-1.jsonl") && err.contains("broken link"), "{err}");
    std::fs::remove_file(root.join("data/part-1.jsonl")).unwrap();
    put(root, "array/docs.json", b"[{\"text\": \"one\"},\n {\"text\": \"two\"}]\n");
    let err = build(&quoted(&root.join("array")));
    assert!(err.contains("docs.json") && err.contains("one JSON array"), "{err}");
    let err = build(&format!("[{}, {}]", quoted(&root.join("data")), quoted(&root.join("data/part-0.jsonl"))));
    assert!(err.contains("named twice"), "{err}");

    // A shard that becomes unreadable mid-run: the error names it.
    let big = root.join("big");
    put(&big, "part-0.jsonl", &lines("b", 0, 400));
    let s = spec(&quoted(&big), None);
    let mut loader = s.pipeline().unwrap().build(s.topology(1, 0).unwrap()).unwrap();
    loader.next_step().unwrap();
    std::fs::write(big.join("part-0.jsonl"), b"{\"text\": \"cut\"}\n").unwrap();
    let err = (0..400).find_map(|_| loader.next_step().err()).map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("part-0.jsonl"), "{err}");
}
