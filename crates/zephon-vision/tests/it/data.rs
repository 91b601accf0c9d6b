//! Test data location, the Pillow oracle, and image comparison.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The fetched test data, or `None` when skipping (see `zephon_testkit::testdata_or_skip`).
pub fn testdata(test: &str) -> Option<PathBuf> {
    zephon_testkit::testdata_or_skip(test)
}

/// The captioned photos, sorted by name.
pub fn captioned(td: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(td.join("images/captioned/jpg"))
        .expect("images/captioned/jpg (run scripts/fetch-testdata.sh)")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jpg"))
        .collect();
    v.sort();
    assert_eq!(v.len(), 43, "the fetch script builds 43 captioned photos");
    v
}

/// Pillow 12 in the test-data venv, run on a batch of jobs (see `tests/oracle/pillow_oracle.py`).
pub struct Oracle {
    python: PathBuf,
    dir: tempfile::TempDir,
}

impl Oracle {
    /// The venv's Python, or `ZEPHON_ORACLE_PYTHON` (e.g. one with NumPy, which the NumPy
    /// path of the Qwen2-VL reference then uses).
    pub fn new(td: &Path) -> Oracle {
        let python =
            std::env::var_os("ZEPHON_ORACLE_PYTHON").map(PathBuf::from).unwrap_or_else(|| td.join("venv/bin/python"));
        assert!(
            python.is_file(),
            "the Pillow oracle needs {} (built by `bash scripts/fetch-testdata.sh`)",
            python.display()
        );
        Oracle { python, dir: tempfile::tempdir().unwrap() }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs the jobs; one result object per job.
    pub fn run(&self, jobs: &[Value]) -> Vec<Value> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/pillow_oracle.py");
        let jobs_path = self.dir.path().join("jobs.json");
        std::fs::write(&jobs_path, serde_json::to_vec(jobs).unwrap()).unwrap();
        let out = Command::new(&self.python).arg(&script).arg(&jobs_path).arg(self.dir.path()).output().unwrap();
        assert!(out.status.success(), "oracle failed: {}", String::from_utf8_lossy(&out.stderr));
        let text = std::fs::read_to_string(self.dir.path().join("results.json")).unwrap();
        let results: Vec<Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(results.len(), jobs.len());
        results
    }

    /// The bytes a job wrote.
    pub fn output(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.path().join(name)).unwrap()
    }
}

/// Peak signal-to-noise ratio of two RGB8 buffers of equal length (infinite when equal).
pub fn psnr(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let se: f64 = a.iter().zip(b).map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2)).sum();
    if se == 0.0 {
        return f64::INFINITY;
    }
    let mse = se / a.len() as f64;
    10.0 * (255.0f64 * 255.0 / mse).log10()
}
