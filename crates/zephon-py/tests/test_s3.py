"""The wheel reads datasets from an S3 server (moto on loopback, started here from
ZEPHON_MOTO_SERVER) exactly as from disk: `s3://` works in the default wheel."""

from __future__ import annotations

import os
import socket
import subprocess
import time
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
    log = open(tmp_path / "moto.log", "wb")
    proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
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
        log.close()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def upload(endpoint: str, root: Path, bucket: str, prefix: str) -> None:
    """Uploads every file under `root` to `bucket/prefix/...` with boto3 from moto's own
    environment: signed requests, as a client with credentials sends them."""
    python = Path(os.environ["ZEPHON_MOTO_SERVER"]).with_name("python")
    script = (
        "import os, sys, boto3\n"
        "endpoint, root, bucket, prefix = sys.argv[1:5]\n"
        "s3 = boto3.client('s3', endpoint_url=endpoint, aws_access_key_id='k',"
        " aws_secret_access_key='s', region_name='us-east-1')\n"
        "try:\n"
        "    s3.create_bucket(Bucket=bucket)\n"
        "except s3.exceptions.BucketAlreadyOwnedByYou:\n"
        "    pass\n"
        "for d, _, names in sorted(os.walk(root)):\n"
        "    for n in sorted(names):\n"
        "        p = os.path.join(d, n)\n"
        "        s3.upload_file(p, bucket, prefix + '/' + os.path.relpath(p, root))\n"
    )
    subprocess.run([str(python), "-c", script, endpoint, str(root), bucket, prefix], check=True,
                   timeout=300)


def test_a_loader_over_s3_gives_the_steps_of_the_same_files_on_disk(tmp_path, data, s3):
    for corpus, fmt in (("a", "jsonl"), ("b", "parquet")):
        upload(s3, data / "corpora" / corpus / fmt, "corpora", f"{corpus}/{fmt}")
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
