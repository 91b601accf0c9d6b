//! An S3 server that nobody here wrote, for the object-storage tests: moto's server
//! (`scripts/moto.sh` installs it; `scripts/test.sh` exports `ZEPHON_MOTO_SERVER`), one per
//! test on a free loopback port, with its request log.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running moto server; stopped when dropped.
pub struct S3Server {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl S3Server {
    /// Starts a server, or `None` (said on stderr) when `ZEPHON_MOTO_SERVER` is not set and
    /// `ZEPHON_REQUIRE_TESTDATA` is not either: with it set (as `scripts/test.sh` does), a
    /// missing server fails the test.
    pub fn start() -> Option<S3Server> {
        let Some(bin) = std::env::var_os("ZEPHON_MOTO_SERVER") else {
            assert!(
                std::env::var_os("ZEPHON_REQUIRE_TESTDATA").is_none(),
                "ZEPHON_MOTO_SERVER is not set: run `bash scripts/moto.sh` and export its output (scripts/test.sh does)"
            );
            eprintln!("no S3 server (ZEPHON_MOTO_SERVER unset): skipped");
            return None;
        };
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let dir = tempfile::tempdir().expect("a log folder");
        let log = dir.path().join("moto.log");
        let child = Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the log"))
            .spawn()
            .expect("moto_server starts");
        let server = S3Server { child, port, log, _dir: dir };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(60), "moto_server did not listen within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(server)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The environment a client of this server needs: test credentials and a region (moto
    /// accepts any signature).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", "zephon-test-key".into()),
            ("AWS_SECRET_ACCESS_KEY", "zephon-test-secret".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    /// Sets [`S3Server::env`] in this process.
    #[allow(unsafe_code)]
    pub fn set_env(&self) {
        for (k, v) in self.env() {
            // SAFETY: tests set the same values before any thread reads them.
            unsafe { std::env::set_var(k, v) };
        }
    }

    /// Runs boto3 (installed with moto) against the server: signed requests, as a client
    /// with credentials sends them (moto refuses an anonymous overwrite).
    fn boto(&self, script: &str, args: &[&str]) {
        let server = std::env::var_os("ZEPHON_MOTO_SERVER").expect("the server was started from it");
        let python = Path::new(&server).with_file_name("python");
        let status = Command::new(python)
            .arg("-c")
            .arg(format!(
                "import sys, boto3\ns3 = boto3.client('s3', endpoint_url={:?}, aws_access_key_id='k', \
                 aws_secret_access_key='s', region_name='us-east-1')\n{script}",
                self.endpoint()
            ))
            .args(args)
            .status()
            .expect("boto3 runs");
        assert!(status.success(), "boto3: {script} {args:?}");
    }

    /// Creates `bucket`.
    pub fn create_bucket(&self, bucket: &str) {
        self.boto("s3.create_bucket(Bucket=sys.argv[1])", &[bucket]);
    }

    /// Puts `bytes` at `bucket/key`.
    pub fn put(&self, bucket: &str, key: &str, bytes: &[u8]) {
        let file = tempfile::NamedTempFile::new().expect("a temporary file");
        std::fs::write(file.path(), bytes).expect("written");
        self.boto(
            "s3.upload_file(sys.argv[3], sys.argv[1], sys.argv[2])",
            &[bucket, key, &file.path().to_string_lossy()],
        );
    }

    /// Uploads every file under `dir` to `bucket/prefix/<relative path>`.
    pub fn upload(&self, dir: &Path, bucket: &str, prefix: &str) {
        self.boto(
            "import os\nroot, bucket, prefix = sys.argv[1:4]\n\
             for d, _, names in os.walk(root):\n\
             \x20   for n in names:\n\
             \x20       p = os.path.join(d, n); rel = os.path.relpath(p, root)\n\
             \x20       s3.upload_file(p, bucket, f'{prefix}/{rel}' if prefix else rel)",
            &[&dir.to_string_lossy(), bucket, prefix],
        );
    }

    /// The request lines the server logged so far (`GET /bucket/key HTTP/1.1` and its status).
    pub fn requests(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let start = l.find('"')?;
                let end = l[start + 1..].find('"')? + start + 1;
                // Strip the terminal colours moto puts on errors.
                let line: String =
                    l[start + 1..end].split('\u{1b}').map(|p| p.split_once('m').map_or(p, |(_, r)| r)).collect();
                Some(format!("{line} {}", l[end + 1..].trim()))
            })
            .collect()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
