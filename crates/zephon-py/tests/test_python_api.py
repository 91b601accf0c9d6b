"""The wheel as a Python user meets it: errors of the classes Python users expect, spec warnings
through `warnings.warn`, Ctrl-C during a first build, threads shared among the ranks of a node,
and package metadata that is true."""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import zephon_rs
from conftest import text_spec


def test_errors_are_of_the_classes_python_users_expect(tmp_path, spec_file):
    with pytest.raises(FileNotFoundError, match="no such file"):
        zephon_rs.Loader(tmp_path / "missing.toml", dp_rank=0, dp_world_size=1)
    with pytest.raises(ValueError, match="together"):
        zephon_rs.Loader(spec_file, dp_rank=0)
    with pytest.raises(ValueError, match="must divide the lane count"):
        zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=3)
    with pytest.raises(ValueError, match="snapshot_every"):
        zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1, snapshot_every=0)
    step = next(zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1))
    with pytest.raises(ValueError, match="microbatch size 3 does not divide"):
        step.microbatches(3)
    with pytest.raises(ValueError, match="layout"):
        step.batch(layout="torchtune")
    # Data and checkpoints keep the project's classes.
    bad = tmp_path / "bad.toml"
    bad.write_text(spec_file.read_text().replace("/corpora/a/jsonl", "/corpora/nowhere"))
    with pytest.raises(zephon_rs.DataError, match="nowhere"):
        next(zephon_rs.Loader(bad, dp_rank=0, dp_world_size=1))
    with pytest.raises(zephon_rs.CheckpointError):
        zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1).load_state_dict(
            {"zephon": {"format": zephon_rs.CHECKPOINT_FORMAT, "step": 1, "lanes": 8, "run": b"damaged"}, "lanes": {}})


def test_spec_warnings_are_python_warnings(tmp_path, data):
    spec = tmp_path / "run.toml"
    spec.write_text(text_spec(data).replace("slack_tokens = 4096", "slack_tokens = 4096\nhold = 8"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        zephon_rs.Loader(spec, dp_rank=0, dp_world_size=1)
    assert any("hold caps the documents held" in str(w.message) for w in caught), [str(w.message) for w in caught]


def test_the_batch_says_its_label_convention(spec_file):
    step = next(zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1))
    z, hf = step.batch(), step.batch(layout="hf")
    assert isinstance(z, zephon_rs.Batch) and z.label_convention == "next_token"
    assert hf.label_convention == "hf" and set(hf) == {"input_ids", "labels", "position_ids"}
    assert hf["labels"].dtype == np.int64 and (hf["labels"][:, 0] == -100).all()
    assert all(m.label_convention == "hf" for m in step.microbatches(1, layout="hf_flat"))


def test_eight_ranks_of_a_node_share_its_cores(tmp_path, data):
    spec_file = tmp_path / "run.toml"
    spec_file.write_text(text_spec(data, threads=None))
    script = textwrap.dedent("""\
        import json, sys, zephon_rs
        l = zephon_rs.Loader(sys.argv[1])
        print(json.dumps({"threads": l.threads, "explain": l.explain()}))
        """)
    cores = len(os.sched_getaffinity(0))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(spec_file)], stdout=subprocess.PIPE,
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE="8", LOCAL_WORLD_SIZE="8"))
             for r in range(8)]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        got = json.loads(out)
        assert got["threads"] == max(1, cores // 8), got["threads"]
        assert f"{cores} cores / LOCAL_WORLD_SIZE 8" in got["explain"]


def test_ctrl_c_interrupts_a_first_build(tmp_path, data):
    # A cold cache: the first build hashes, indexes and measures every shard.
    script = textwrap.dedent("""\
        import sys, time, zephon_rs
        l = zephon_rs.Loader(sys.argv[1], dp_rank=0, dp_world_size=1)
        print("building", flush=True)
        try:
            next(l)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """)
    spec = tmp_path / "run.toml"
    spec.write_text(text_spec(data).replace("[source]", "[estimate]\nlength_rows = 1000000\ntoken_windows = 100000\n[source]"))
    p = subprocess.Popen([sys.executable, "-c", script, str(spec)], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, ZEPHON_CACHE=str(tmp_path / "cache")))
    assert p.stdout.readline().strip() == "building"
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    start = time.monotonic()
    out, _ = p.communicate(timeout=60)
    assert "interrupted" in out and time.monotonic() - start < 5, out


def test_the_package_metadata_is_true():
    meta = importlib.metadata.metadata("zephon-rs")
    assert meta["Requires-Python"] == ">=3.10"
    extras = meta.get_all("Requires-Dist") or []
    assert any(r.startswith("torchdata") and "torch" in r for r in extras), extras
