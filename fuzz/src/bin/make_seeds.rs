//! Writes the seed corpora the fuzz targets start from: real checkpoint files and bodies, real
//! JSONL lines and specs. Run once; the output is committed under `fuzz/corpus/`.

use std::fs;
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let tmp = tempfile::tempdir().expect("a temporary folder");
    zephon_fuzz::write_checkpoint(tmp.path());
    let mut files: Vec<_> = fs::read_dir(tmp.path()).expect("listed").flatten().map(|e| e.path()).collect();
    files.sort();
    for (i, f) in files.iter().enumerate() {
        let bytes = fs::read(f).expect("read");
        put(&root.join("checkpoint"), &format!("rank-{i}"), &bytes);
        put(&root.join("restore"), &format!("rank-{i}"), &zephon_fuzz::body_of(&bytes));
    }
    let lines = [
        "{\"text\": \"hello\", \"id\": 1}\n{\"text\": \"two\"}\n",
        "\u{feff}{\"text\": \"bom\"}\r\n\r\n{\"text\": \"crlf\"}",
        "{\"text\": [\"a\", \"b\"]}\n{\"text\": null}\n{\"text\": true}\n{\"text\": 1.5e400}\n",
        "{\"text\": \"\\ud800\"}\n{\"text\": \"unterminated\n",
    ];
    for (i, l) in lines.iter().enumerate() {
        put(&root.join("jsonl"), &format!("lines-{i}"), l.as_bytes());
    }
    let spec = "seed = 1\nlanes = 8\nrows_per_step = 16\n[[dataset]]\nname = \"a\"\npath = \"a.jsonl\"\nshare = 0.5\n\
                [[dataset]]\nname = \"b\"\npath = \"b\"\nshare = 0.5\ntext_field = \"content\"\n[source]\nchunk_size = 64\n\
                order = \"blocks\"\nblock_size = 100\nexhaustion = \"stop\"\n[pack]\nalgorithm = \"best_fit\"\nseq_len = 2048\n\
                [shuffle]\nbuffer = 64\n[run]\nthreads = 2\nbad_records = \"skip\"\n";
    put(&root.join("spec"), "full", spec.as_bytes());
    // Images the project's own pure-Python encoder made (scripts/testdata/jpegenc.py): every
    // chroma subsampling and restart intervals.
    let edge = std::env::var_os("ZEPHON_TESTDATA")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/zephon-testdata")
        })
        .join("images/edge");
    for name in ["gen_py_sub420.jpg", "gen_py_sub444.jpg", "gen_py_restart1_420.jpg", "gen_py_gray.jpg"] {
        if let Ok(bytes) = fs::read(edge.join(name)) {
            put(&root.join("image"), name, &bytes);
        }
    }
}

fn put(dir: &Path, name: &str, bytes: &[u8]) {
    fs::create_dir_all(dir).expect("corpus folder");
    fs::write(dir.join(name), bytes).expect("seed written");
}
