"""The loader from Python: steps as zero-copy numpy arrays, specs in every form, ranks,
the GIL released while Rust works, Ctrl-C, errors as exceptions, no half-working copies."""

from __future__ import annotations

import _thread
import gc
import json
import multiprocessing
import os
import pickle
import threading
import time
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest

import zephon_rs
from conftest import fingerprints, text_spec


def test_arrays_are_views_of_the_rust_buffers(spec_file):
    loader = zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1)
    batch = next(loader).batch()
    for name in ["input_ids", "labels", "positions", "segment_ids", "cu_seqlens", "max_seqlen", "loss_mask"]:
        a = batch[name]
        assert isinstance(a, np.ndarray), name
        assert not a.flags.owndata, name
        assert isinstance(a.base, zephon_rs.RustBuffer), (name, type(a.base))
        assert len(a.base) == a.size and a.flags.writeable, name
    ids = batch["input_ids"]
    assert ids.dtype == np.uint32 and ids.shape == (16, 512)
    assert batch["labels"].dtype == np.int32 and batch["loss_mask"].dtype == np.uint8
    # The array keeps its Rust owner alive when the dict and the step are gone.
    first = ids[0].copy()
    del batch
    gc.collect()
    np.testing.assert_array_equal(ids[0], first)
    # The same memory: a view of a view still has the buffer as its base.
    assert np.shares_memory(ids, ids[1:])


def test_int64_widens_token_columns_in_rust(spec_file):
    loader = zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1)
    step = next(loader)
    narrow, wide = step.batch(), step.batch(int64=True)
    for k in ["input_ids", "labels", "positions", "segment_ids", "cu_seqlens"]:
        assert wide[k].dtype == np.int64
        np.testing.assert_array_equal(wide[k], narrow[k].astype(np.int64))
    assert wide["loss_mask"].dtype == np.uint8


def test_microbatches_are_slices_of_the_step(spec_file):
    loader = zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1)
    step = next(loader)
    whole = step.batch()
    parts = step.microbatches(4)
    assert len(parts) == 4
    for k in whole:
        np.testing.assert_array_equal(np.concatenate([p[k] for p in parts]), whole[k])
    with pytest.raises(ValueError, match="does not divide"):
        step.microbatches(5)


def test_a_path_a_toml_string_and_a_dict_give_the_same_steps(spec_file):
    text = spec_file.read_text()
    runs = [
        zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1),
        zephon_rs.Loader(str(spec_file), dp_rank=0, dp_world_size=1),
        zephon_rs.Loader(text, dp_rank=0, dp_world_size=1),
        zephon_rs.Loader(tomllib.loads(text), dp_rank=0, dp_world_size=1),
    ]
    got = [fingerprints(l, 3) for l in runs]
    assert all(g == got[0] for g in got)


def test_ranks_come_from_arguments_or_the_launcher_and_never_default(spec_file, monkeypatch):
    for k in ["RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
              "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "PMIX_SIZE"]:
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ValueError, match="no dp_rank/dp_world_size given"):
        zephon_rs.Loader(spec_file)
    with pytest.raises(ValueError, match="together"):
        zephon_rs.Loader(spec_file, dp_rank=0)
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    loader = zephon_rs.Loader(spec_file)
    assert (loader.dp_rank, loader.dp_world_size, loader.owned_lanes) == (3, 4, [6, 7])
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ValueError, match="RANK and WORLD_SIZE must be set together"):
        zephon_rs.Loader(spec_file)
    with pytest.raises(ValueError, match="must divide the lane count"):
        zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=3)


def test_every_dp_size_gives_the_same_global_steps(spec_file):
    reference = fingerprints(zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1), 4)
    for w in [2, 4, 8]:
        loaders = [zephon_rs.Loader(spec_file, dp_rank=r, dp_world_size=w) for r in range(w)]
        got = []
        for _ in range(4):
            steps = [next(l) for l in loaders]
            assert {s.index for s in steps} == {len(got)}
            got.append(zephon_rs.step_fingerprint([d for s in steps for d in s.lane_digests()]))
        assert got == reference, w


def test_provenance_names_the_documents_of_each_row(spec_file):
    loader = zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1)
    step = next(loader)
    prov = step.provenance()
    assert len(prov) == len(step) == 16
    batch = step.batch()
    for row, pieces in enumerate(prov):
        assert pieces, row
        for dataset, shard, r, start, end in pieces:
            assert dataset in ("a", "b") and shard >= 0 and r >= 0 and 0 <= start < end
        # The row's real tokens are exactly the pieces' token ranges.
        assert sum(e - s for _, _, _, s, e in pieces) == int(batch["num_tokens"][row])


def test_the_gil_is_released_while_the_engine_works(spec_file):
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    loader = zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1)
    t = threading.Thread(target=ticker)
    t.start()
    try:
        before = len(ticks)
        # The first step opens the data, plans the mixture and tokenizes: all in Rust.
        step = loader.next_step()
        during_first = len(ticks) - before
        before = len(ticks)
        step.batch()
        for _ in range(5):
            next(loader).batch()
    finally:
        stop.set()
        t.join()
    assert during_first > 5, f"the Python thread ran {during_first} times during the first step"


def test_ctrl_c_interrupts_a_waiting_step(tmp_path, data):
    # A step of 8 M tokens on one thread takes seconds; the interrupt comes long before.
    spec = tmp_path / "slow.toml"
    spec.write_text(text_spec(data, rows=512, seq_len=16384, threads=1))
    loader = zephon_rs.Loader(spec, dp_rank=0, dp_world_size=1)
    threading.Timer(0.3, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        loader.next_step()
        time.sleep(60)  # only reached if the step finished first; the interrupt lands here then
    assert loader.position == 0, "the interrupt stopped the wait, not a finished step"
    loader.close()


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_dropping_a_loader_mid_run_stops_its_threads(spec_file):
    gc.collect()
    baseline = _threads()
    loader = zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1, threads=2)
    it = iter(loader)
    next(it)
    assert _threads() >= baseline + 2
    del it, loader
    gc.collect()
    assert _threads() == baseline
    with zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1) as loader:
        next(loader)
    assert _threads() == baseline


def test_a_bad_record_is_a_data_error_naming_dataset_shard_and_row(tmp_path, data):
    shard = tmp_path / "docs"
    shard.mkdir()
    lines = [json.dumps({"text": f"document {i} " * 20}) for i in range(40)]
    lines[17] = '{"text": "unterminated'
    (shard / "part-0.jsonl").write_text("\n".join(lines) + "\n")
    spec = tmp_path / "bad.toml"
    spec.write_text(f"""lanes = 1
rows_per_step = 1
[[dataset]]
name = "broken"
path = "{shard}"
weight = 1.0
[source]
order = "sequential"
exhaustion = "stop"
chunk_size = 4
[tokenize]
tokenizer = "{data}/tokenizers/gpt2/tokenizer.json"
[run]
threads = 1
""")
    loader = zephon_rs.Loader(spec, dp_rank=0, dp_world_size=1)
    with pytest.raises(zephon_rs.DataError) as e:
        for _ in loader:
            pass
    msg = str(e.value)
    assert "broken" in msg and "shard 0" in msg and "row 17" in msg, msg
    assert isinstance(e.value, zephon_rs.Error)


def test_a_bad_spec_is_a_spec_error_naming_the_key(tmp_path, spec_file):
    with pytest.raises(zephon_rs.SpecError, match="colour"):
        zephon_rs.Loader(spec_file.read_text() + "colour = 3\n", dp_rank=0, dp_world_size=1)
    with pytest.raises(FileNotFoundError, match="no such file"):
        zephon_rs.Loader(tmp_path / "missing.toml", dp_rank=0, dp_world_size=1)
    with pytest.raises(TypeError):
        zephon_rs.Loader(42, dp_rank=0, dp_world_size=1)


def test_loaders_refuse_pickling_and_a_forked_copy_refuses_to_run(spec_file):
    loader = zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(loader)
    step = next(loader)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(step)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()

    def child():
        try:
            next(loader)
            q.put("ran")
        except zephon_rs.Error as e:
            q.put(str(e))

    p = ctx.Process(target=child)
    p.start()
    p.join(60)
    assert "copied into process" in q.get(timeout=5)


def test_help_shows_real_docstrings():
    for obj in [zephon_rs.Loader, zephon_rs.Loader.state_dict, zephon_rs.Loader.load_state_dict,
                zephon_rs.Step.batch, zephon_rs.Step.lane_digests, zephon_rs]:
        assert obj.__doc__ and len(obj.__doc__) > 40, obj
    assert "dp_world_size" in zephon_rs.Loader.__doc__
    assert issubclass(zephon_rs.DataError, zephon_rs.Error) and issubclass(zephon_rs.Error, Exception)


def test_file_checkpoints_resume_at_another_dp_size(tmp_path, spec_file):
    reference = fingerprints(zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1), 6)
    ranks = [zephon_rs.Loader(spec_file, dp_rank=r, dp_world_size=4) for r in range(4)]
    for _ in range(3):
        for l in ranks:
            next(l)
    for l in ranks:
        l.checkpoint(tmp_path / "ckpt")
    resumed = zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1, resume_from=tmp_path / "ckpt")
    assert resumed.position == 3
    assert fingerprints(resumed, 3) == reference[3:]


def scheduled_spec(data: Path) -> str:
    """A batch-size ramp (16 → 32 at step 2) and a curriculum (50/50, then 20/80 at step 3)."""
    text = text_spec(data, rows=16).replace("rows_per_step = 16\n", "").replace("share = 0.5\n", "")
    return text + textwrap.dedent("""\
        [schedule]
        rows_per_step = [[0, 16], [2, 32]]
        shares = [[0, { a = 0.5, b = 0.5 }], [3, { a = 0.2, b = 0.8 }]]
        """)


def test_a_trainer_can_ask_for_the_schedules_and_they_resume_at_another_dp_size(tmp_path, data):
    spec = tmp_path / "scheduled.toml"
    spec.write_text(scheduled_spec(data))
    loader = zephon_rs.Loader(spec, dp_rank=1, dp_world_size=2)
    assert [loader.rows_per_step_at(s) for s in range(4)] == [16, 16, 32, 32]
    assert [loader.local_rows_at(s) for s in range(4)] == [8, 8, 16, 16]
    assert loader.token_shares(2) == {"a": 0.5, "b": 0.5}
    assert loader.token_shares(3) == pytest.approx({"a": 0.2, "b": 0.8})
    assert (loader.rows_per_step, loader.local_rows) == (16, 8)
    steps = [next(loader) for _ in range(3)]
    assert [s.batch()["input_ids"].shape[0] for s in steps] == [8, 8, 16]
    assert (loader.rows_per_step, loader.token_shares()) == (32, pytest.approx({"a": 0.2, "b": 0.8}))

    reference = fingerprints(zephon_rs.Loader(spec, dp_rank=0, dp_world_size=1), 5)
    ranks = [zephon_rs.Loader(spec, dp_rank=r, dp_world_size=4) for r in range(4)]
    for _ in range(2):
        for l in ranks:
            next(l)
    for l in ranks:
        l.checkpoint(tmp_path / "ckpt")
    resumed = zephon_rs.Loader(spec, dp_rank=0, dp_world_size=1, resume_from=tmp_path / "ckpt")
    assert resumed.notices == []
    assert fingerprints(resumed, 3) == reference[2:]

    # A schedule that changes only after the checkpoint's step resumes, and says so.
    later = tmp_path / "later.toml"
    later.write_text(scheduled_spec(data).replace("[3, { a = 0.2", "[4, { a = 0.2"))
    moved = zephon_rs.Loader(later, dp_rank=0, dp_world_size=1, resume_from=tmp_path / "ckpt")
    assert any("after the checkpoint's step 2" in n for n in moved.notices), moved.notices


def test_a_chat_spec_trains_on_the_assistant_tokens_only(tmp_path, data):
    spec = tmp_path / "chat.toml"
    spec.write_text(textwrap.dedent(f"""\
        seed = 3
        lanes = 2
        rows_per_step = 4
        [[dataset]]
        name = "sft"
        path = "{data}/chat/conversations.jsonl"
        weight = 1.0
        [chat]
        tokenizer = "{data}/tokenizers/llama3_1/tokenizer.json"
        template = "{data}/chat/templates/llama3_training.jinja"
        variables = {{ bos_token = "<|begin_of_text|>", eos_token = "<|eot_id|>" }}
        [pack]
        algorithm = "best_fit"
        seq_len = 256
        pad_id = 128001
        mask_labels = true
        """))
    loader = zephon_rs.Loader(spec, dp_rank=0, dp_world_size=1)
    b = next(loader).batch()
    mask, labels = b["loss_mask"], b["labels"]
    assert mask.dtype == np.uint8 and mask.shape == labels.shape == (4, 256)
    assert ((mask == 1) == (labels != -100)).all()
    assert 0 < mask.sum() < mask.size


def test_a_validation_pass_is_the_same_at_every_dp_size_and_ends_together(tmp_path, data):
    spec = tmp_path / "val.toml"
    spec.write_text(text_spec(data, lanes=4, rows=8, seq_len=128) + textwrap.dedent(f"""\
        [validation]
        [[validation.dataset]]
        name = "held-out"
        path = "{data}/chat/conversations.jsonl"
        text_field = "id"
        """))
    one = zephon_rs.ValidationLoader(spec, dp_rank=0, dp_world_size=1)
    reference = [zephon_rs.step_fingerprint(s.lane_digests()) for s in one]
    # 1611 records, 4 lanes of 2 rows a step.
    assert len(reference) == one.steps == 202
    ranks = [zephon_rs.ValidationLoader(spec, dp_rank=r, dp_world_size=2) for r in range(2)]
    got = []
    for _ in range(202):
        steps = [next(r) for r in ranks]
        got.append(zephon_rs.step_fingerprint([d for s in steps for d in s.lane_digests()]))
    assert got == reference
    for r in ranks:
        with pytest.raises(StopIteration):
            next(r)
