"""The wheel reads datasets from an S3 server (moto on loopback, started here from
ZEPHON_MOTO_SERVER) exactly as from disk: `s3://` works in the default wheel."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

import zephon_rs
from conftest import fingerprints, text_spec


@pytest.fixture
def s3(tmp_path: Path):
    server = os.environ.get("ZEPHON_MOTO_SERVER")
    if not server:
        msg = "ZEPHON_MOTO_SERVER is not set: run `bash scripts/moto.sh` (scripts/test.sh does)"
        if os.environ.get("ZEPHON_REQUIRE_TESTDATA"):
            pytest.fail(msg)
        pytest.skip(msg)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.1)
    old = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="zephon-test-key", AWS_SECRET_ACCESS_KEY="zephon-test-secret",
                      AWS_REGION="us-east-1")
    try:
        yield endpoint
    finally:
        proc.kill()
        proc.wait()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def put(endpoint: str, path: str, body: bytes = b"") -> None:
    # moto takes unsigned uploads.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{path}", data=body, method="PUT")).read()


def test_a_loader_over_s3_gives_the_steps_of_the_same_files_on_disk(tmp_path, data, s3):
    put(s3, "corpora")
    for corpus, fmt in (("a", "jsonl"), ("b", "parquet")):
        for f in sorted((data / "corpora" / corpus / fmt).iterdir()):
            put(s3, f"corpora/{corpus}/{fmt}/{f.name}", f.read_bytes())
    storage = (f'\n[storage]\nendpoint = "{s3}"\nallow_http = true\npath_style = true\n'
               f'cache_dir = "{tmp_path / "blocks"}"\n')
    local = text_spec(data, extra=storage)
    remote = local.replace(f"{data}/corpora/", "s3://corpora/")
    assert "s3://corpora/a/jsonl" in remote
    want = fingerprints(zephon_rs.Loader(local, dp_rank=0, dp_world_size=1), 4)
    loader = zephon_rs.Loader(remote, dp_rank=0, dp_world_size=1)
    assert fingerprints(loader, 4) == want
    report = loader.report()
    assert all(d["requests"] > 0 for d in report["datasets"]), report
