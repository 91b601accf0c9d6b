"""Fixtures of the zephon_rs tests: the real test data (fetched by scripts/fetch-testdata.sh),
specs over it, the `zephon` command, and rank processes launched the way torchrun sets them up.

The tests run against the installed wheel, never the source tree: this folder has no
`zephon_rs` package in it, and `python -m pytest` is run from elsewhere by scripts/test-python.sh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import zephon_rs

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


def _testdata() -> Path:
    d = Path(os.environ.get("ZEPHON_TESTDATA", Path.home() / ".cache" / "zephon-testdata"))
    if not (d / "READY").is_file():
        msg = f"test data missing at {d}: run `bash scripts/fetch-testdata.sh` (scripts/test.sh does)"
        if os.environ.get("ZEPHON_REQUIRE_TESTDATA"):
            pytest.fail(msg)
        pytest.skip(msg)
    return d


@pytest.fixture(scope="session")
def data() -> Path:
    return _testdata()


def text_spec(data: Path, *, lanes: int = 8, rows: int = 16, seq_len: int = 512, seed: int = 7,
              extra: str = "", threads: int | None = 2) -> str:
    """Corpus A (JSONL) and corpus B (Parquet) 50/50 by tokens, GPT-2, ensure_mixture,
    best-fit packing, a shuffle buffer; `threads=None` leaves the default."""
    run = "" if threads is None else f"[run]\nthreads = {threads}\n"
    return textwrap.dedent(f"""\
        seed = {seed}
        lanes = {lanes}
        rows_per_step = {rows}
        [[dataset]]
        name = "a"
        path = "{data}/corpora/a/jsonl"
        share = 0.5
        [[dataset]]
        name = "b"
        path = "{data}/corpora/b/parquet"
        share = 0.5
        [source]
        chunk_size = 32
        [tokenize]
        tokenizer = "{data}/tokenizers/gpt2/tokenizer.json"
        eos = "<|endoftext|>"
        [ensure_mixture]
        slack_tokens = 4096
        [pack]
        algorithm = "best_fit"
        seq_len = {seq_len}
        bins = 16
        pad_id = 50256
        [shuffle]
        buffer = 8
        """) + run + extra


@pytest.fixture
def spec_file(tmp_path: Path, data: Path) -> Path:
    p = tmp_path / "run.toml"
    p.write_text(text_spec(data))
    return p


def fingerprints(loader: zephon_rs.Loader, steps: int) -> list[str]:
    """Global fingerprints of the next `steps` steps of a loader that holds every lane."""
    return [zephon_rs.step_fingerprint(next(loader).lane_digests()) for _ in range(steps)]


def zephon_cli() -> Path:
    """The `zephon` command, built by scripts/test-python.sh (or ZEPHON_BIN)."""
    p = Path(os.environ.get("ZEPHON_BIN", REPO / "target" / "release" / "zephon"))
    if not p.is_file():
        pytest.fail(f"no zephon command at {p}: build it with `cargo build --release -p zephon-cli` or set ZEPHON_BIN")
    return p


def cli_fingerprints(spec: Path, steps: int, tmp: Path) -> list[str]:
    """Every step's global fingerprint from `zephon run --hash-log` at W = 1."""
    log = tmp / "cli-hash.tsv"
    subprocess.run([str(zephon_cli()), "run", "--spec", str(spec), "--steps", str(steps), "--world-size", "1",
                    "--rank", "0", "--hash-log", str(log)], check=True, capture_output=True)
    return combine_hash_logs([log])


def combine_hash_logs(logs: list[Path]) -> list[str]:
    """Global fingerprints from hash logs (`step<TAB>lane<TAB>digest`) of any ranks."""
    by_step: dict[int, list[tuple[int, bytes]]] = {}
    for log in logs:
        for line in log.read_text().splitlines():
            s, lane, d = line.split("\t")
            by_step.setdefault(int(s), []).append((int(lane), bytes.fromhex(d)))
    return [zephon_rs.step_fingerprint(by_step[s]) for s in sorted(by_step)]


RANK_SCRIPT = textwrap.dedent("""\
    import json, os, sys
    import zephon_rs
    args = json.loads(sys.argv[1])
    loader = zephon_rs.Loader(args["spec"])            # rank and size from RANK / WORLD_SIZE
    if args.get("load"):
        loader.load_state_dict(zephon_rs_state.load(args["load"]))
    with open(args["log"], "w") as log:
        for _ in range(args["steps"]):
            step = loader.next_step()
            for lane, d in step.lane_digests():
                log.write(f"{step.index}\\t{lane}\\t{d.hex()}\\n")
    if args.get("save"):
        zephon_rs_state.save(loader.state_dict(), args["save"], loader.dp_rank)
""")

STATE_HELPERS = textwrap.dedent("""\
    import json, os
    class zephon_rs_state:
        # A state dict on disk the way a checkpoint store keeps it: the replicated entry once,
        # each lane's entry in a file of its own.
        @staticmethod
        def save(sd, root, rank):
            os.makedirs(root, exist_ok=True)
            z = dict(sd["zephon"]); run = z.pop("run")
            if rank == 0:
                open(os.path.join(root, "run.bin"), "wb").write(run)
                json.dump(z, open(os.path.join(root, "zephon.json"), "w"))
            for k, v in sd["lanes"].items():
                open(os.path.join(root, k + ".bin"), "wb").write(v)
        @staticmethod
        def load(root):
            z = json.load(open(os.path.join(root, "zephon.json")))
            z["run"] = open(os.path.join(root, "run.bin"), "rb").read()
            lanes = {f[:-4]: open(os.path.join(root, f), "rb").read() for f in os.listdir(root) if f.startswith("lane_")}
            return {"zephon": z, "lanes": lanes}
""")


def run_ranks(world: int, args: dict, tmp: Path, tag: str) -> list[Path]:
    """`world` rank processes of RANK_SCRIPT, each given RANK / WORLD_SIZE / LOCAL_RANK /
    MASTER_ADDR / MASTER_PORT as torchrun sets them; returns their hash logs."""
    script = tmp / "rank.py"
    script.write_text(STATE_HELPERS + RANK_SCRIPT)
    procs, logs = [], []
    for r in range(world):
        log = tmp / f"{tag}-rank{r}.tsv"
        logs.append(log)
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT="29511", GROUP_RANK="0")
        procs.append(subprocess.Popen([sys.executable, str(script), json.dumps(dict(args, log=str(log)))], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp))
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()
    return logs
