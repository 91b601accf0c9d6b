"""The PyTorch adapters: tensors without copies, torchdata's StatefulDataLoader, a
torch.distributed.checkpoint of 4 gloo ranks loaded into 2, TorchTitan's loader interface and
checkpointer, and a training loop whose loss curve does not move with the dp size.

Run where torch, torchdata and torchtitan are installed (scripts/test-python.sh sets that up).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch") if not os.environ.get("ZEPHON_REQUIRE_TORCH") else importlib.import_module("torch")
import numpy as np  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import zephon_rs  # noqa: E402
import zephon_rs.torch as zt  # noqa: E402
from conftest import HERE, fingerprints, text_spec  # noqa: E402


def test_tensors_share_the_rust_buffers(spec_file):
    loader = zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1)
    batch = next(loader).batch(int64=True)
    tensors = zt.to_tensors(batch)
    for k in ["input_ids", "labels", "positions"]:
        assert tensors[k].dtype == torch.int64
        assert tensors[k].data_ptr() == batch[k].ctypes.data, k
    # DLPack takes them without a copy too.
    assert torch.from_dlpack(batch["labels"]).data_ptr() == batch["labels"].ctypes.data


def test_a_stateful_dataloader_resumes_where_it_stopped(spec_file):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def dl():
        return StatefulDataLoader(zt.StepDataset(spec_file, dp_rank=0, dp_world_size=1), batch_size=None, num_workers=0)

    first = dl()
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    assert state["dataset_state"]["zephon"]["step"] == 3
    expected = [next(it)["input_ids"].clone() for _ in range(2)]
    second = dl()
    second.load_state_dict(state)
    it2 = iter(second)
    for want in expected:
        assert torch.equal(next(it2)["input_ids"], want)


def titan_build(spec: str, world: int, rank: int, **extra):
    """The TorchTitan adapter built as the installed TorchTitan's trainer builds its loader,
    and the shape of the batches it should yield."""
    titan = zt.TitanDataLoader
    rows = 16 // world
    if "repeat" in titan.Config.__dataclass_fields__:
        kw, shape = dict(max_context_length=512, num_tokens_per_batch=rows * 512), (rows * 512,)
    else:
        kw, shape = dict(seq_len=512, local_batch_size=rows, snapshot_every_n_steps=1), (rows, 512)
    kw.update(extra)
    return titan.Config(spec=spec).build(dp_world_size=world, dp_rank=rank, tokenizer=None, **kw), shape


def dcp_worker(rank: int, world: int, job: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{job['pg']}", rank=rank, world_size=world)
    if job["kind"] == "titan":
        loader, shape = titan_build(job["spec"], world, rank)
        states = {"dataloader": loader}
        steps = iter(loader)
    else:
        inner = zephon_rs.Loader(job["spec"], dp_rank=rank, dp_world_size=world)
        states = {"dataloader": inner}
        steps = None
    if job.get("resume"):
        dcp.load(states, checkpoint_id=job["resume"])
    digests = []
    for _ in range(job["steps"]):
        if steps is not None:
            # Through the adapter, as the trainer iterates it; the digests come from the step
            # the adapter just took.
            inputs, labels = next(steps)
            assert inputs["input"].shape == shape and labels.dtype == torch.int64
            digests.append([(l, d.hex()) for l, d in loader.last_step.lane_digests()])
        else:
            digests.append([(l, d.hex()) for l, d in next(inner).lane_digests()])
    if job.get("save"):
        dcp.save(states, checkpoint_id=job["save"])
    Path(job["out"]).with_suffix(f".{rank}.json").write_text(json.dumps(digests))
    dist.destroy_process_group()


def launch(world: int, job: dict, tmp: Path, tag: str) -> list[str]:
    job = dict(job, pg=str(tmp / f"pg-{tag}"), out=str(tmp / f"{tag}.json"))
    mp.start_processes(dcp_worker, args=(world, job), nprocs=world, start_method="spawn", join=True)
    per_rank = [json.loads(Path(job["out"]).with_suffix(f".{r}.json").read_text()) for r in range(world)]
    return [zephon_rs.step_fingerprint([(l, bytes.fromhex(d)) for rank in per_rank for l, d in rank[s]])
            for s in range(job["steps"])]


@pytest.mark.parametrize("kind", ["loader", "titan"])
def test_a_distributed_checkpoint_of_4_ranks_loads_into_2(tmp_path, spec_file, kind):
    reference = fingerprints(zephon_rs.Loader(spec_file, dp_rank=0, dp_world_size=1), 6)
    spec = str(spec_file)
    before = launch(4, {"kind": kind, "spec": spec, "steps": 3, "save": str(tmp_path / "ckpt")}, tmp_path, "save")
    after = launch(2, {"kind": kind, "spec": spec, "steps": 3, "resume": str(tmp_path / "ckpt")}, tmp_path, "load")
    assert before + after == reference


def test_the_torchtitan_loader_is_built_and_checkpointed_as_torchtitan_does(tmp_path, spec_file):
    Titan = zt.TitanDataLoader
    flat = "repeat" in Titan.Config.__dataclass_fields__
    loader, shape = titan_build(str(spec_file), 1, 0, extra="absorbed")
    inputs, labels = next(iter(loader))
    assert set(inputs) == {"input", "positions"} and inputs["input"].shape == shape == labels.shape
    assert inputs["input"].dtype == inputs["positions"].dtype == labels.dtype == torch.int64
    # Every document starts at position 0, and labels are the next token inside a document.
    ids, pos, lab = (t.reshape(-1) for t in (inputs["input"], inputs["positions"], labels))
    inside = (pos[1:] == pos[:-1] + 1)
    assert torch.equal(lab[:-1][inside], ids[1:][inside])
    assert (lab[:-1][~inside] == -100).all()
    # The trainer's microbatch must divide the spec's rows of a step.
    with pytest.raises(ValueError, match="spec .* gives"):
        titan_build(str(spec_file), 1, 0, **({"num_tokens_per_batch": 1536} if flat else {"local_batch_size": 5}))
    # TorchTitan's checkpointer keeps the state under "dataloader", per lane.
    if flat:
        return
    from torchtitan.components.checkpoint import CheckpointManager
    from torch.distributed.checkpoint import FileSystemReader

    class Nothing:
        def state_dict(self):
            return {}

        def load_state_dict(self, _):
            pass

    def manager(dl):
        return CheckpointManager.Config(enable=True, folder="ckpt", interval=1, keep_latest_k=0).build(
            dataloader=dl, model_parts=[torch.nn.Linear(2, 2)], optimizers=Nothing(), lr_schedulers=Nothing(),
            states={}, sd_adapter=None, base_folder=str(tmp_path))

    it = iter(loader)
    for _ in range(2):
        next(it)
    manager(loader).save(curr_step=1)
    keys = sorted(FileSystemReader(str(tmp_path / "ckpt" / "step-1")).read_metadata().state_dict_metadata)
    assert "dataloader.zephon.run" in keys and "dataloader.lanes.lane_000007" in keys, keys
    want = next(it)[0]["input"]
    again, _ = titan_build(str(spec_file), 1, 0)
    manager(again).load()
    assert torch.equal(next(iter(again))[0]["input"], want)


def test_the_loss_curve_does_not_move_with_the_dp_size(data, tmp_path):
    """A tiny causal LM trained at dp size 1 and at 4 resumed at 2 (examples/torch_lm.py): zephon's
    curves agree to float summation order, a DistributedSampler-style loader's do not."""
    sys.path.insert(0, str(HERE.parent / "examples"))
    torch_lm = importlib.import_module("torch_lm")
    c = torch_lm.curves(data, 12, tmp_path)
    s = torch_lm.summary(c)
    assert s["zephon_max_rel_diff"] < 1e-5, s
    assert s["sampler_max_rel_diff"] > 1e-3, s


def _weighted_spec(data: Path, tmp_path: Path) -> Path:
    """Corpus A's first shard with a per-record ``quality`` (by row: 0, 0.5, 1, 1.5) at loss
    weight 0.5, and corpus B at loss weight 2, packed with both per-token columns."""
    src = data / "corpora" / "a" / "jsonl" / "part-00000.jsonl"
    weighted = tmp_path / "a-weighted.jsonl"
    with src.open() as f, weighted.open("w") as out:
        for row, line in enumerate(f):
            record = json.loads(line)
            record["quality"] = (row % 4) * 0.5
            out.write(json.dumps(record) + "\n")
    text = text_spec(data, lanes=4, rows=4, seq_len=128)
    text = text.replace(f'path = "{data}/corpora/a/jsonl"\nshare = 0.5',
                        f'path = "{weighted}"\nshare = 0.5\nloss_weight = 0.5\nloss_weight_field = "quality"')
    text = text.replace(f'path = "{data}/corpora/b/parquet"\nshare = 0.5',
                        f'path = "{data}/corpora/b/parquet"\nshare = 0.5\nloss_weight = 2.0')
    text = text.replace("pad_id = 50256\n", "pad_id = 50256\nsource_ids = true\nloss_weights = true\n")
    assert text.count("loss_weight") == 4, text
    p = tmp_path / "weighted.toml"
    p.write_text(text)
    return p


def test_weighted_and_per_source_losses_equal_a_reference_computed_document_by_document(data, tmp_path):
    spec = _weighted_spec(data, tmp_path)
    loader = zephon_rs.Loader(spec, dp_rank=0, dp_world_size=1)
    names = loader.dataset_names
    assert names == ["a", "b"]
    # A tiny model whose logits at a position depend on its token only, so that a document
    # scores the same alone as inside a packed row.
    torch.manual_seed(0)
    embed = torch.nn.Embedding(50257, 8)
    head = torch.nn.Linear(8, 50257, bias=False)

    def ce(ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.nn.functional.cross_entropy(head(embed(ids)), targets, reduction="none")

    weight_of = {"a": lambda row: 0.5 * (row % 4) * 0.5, "b": lambda row: 2.0}
    for _ in range(3):
        step = next(loader)
        b = zt.to_tensors(step.batch(int64=True))
        ids, labels = b["input_ids"], b["labels"]
        token_ce = ce(ids.flatten(), labels.flatten().clamp(min=0)) * (labels.flatten() != -100)
        w = b["loss_weights"].flatten()
        weighted = (token_ce * w).sum() / w.sum()
        mask = b["loss_mask"].flatten().bool()
        src = b["source_ids"].flatten()[mask]
        per_source = torch.zeros(len(names), dtype=torch.float64).index_add_(0, src, token_ce[mask].double())
        # The reference: each document alone, by the provenance of each row.
        num, den = 0.0, 0.0
        ref_source = torch.zeros(len(names), dtype=torch.float64)
        for r, pieces in enumerate(step.provenance()):
            at = 0
            for dataset, _shard, row, start, end in pieces:
                n = end - start
                doc = ids[r, at:at + n]
                doc_ce = ce(doc[:-1], doc[1:]).double()
                wd = weight_of[dataset](row)
                num += wd * doc_ce.sum().item()
                den += wd * (n - 1)
                ref_source[names.index(dataset)] += doc_ce.sum()
                at += n
        assert den > 0
        assert weighted.item() == pytest.approx(num / den, rel=1e-4)
        assert torch.allclose(per_source, ref_source, rtol=1e-4)


def test_the_torchtitan_loader_hands_over_the_per_token_columns(data, tmp_path):
    spec = _weighted_spec(data, tmp_path)
    titan = zt.TitanDataLoader
    if "repeat" in titan.Config.__dataclass_fields__:
        kw = dict(max_context_length=128, num_tokens_per_batch=4 * 128)
    else:
        kw = dict(seq_len=128, local_batch_size=4, snapshot_every_n_steps=1)
    loader = titan.Config(spec=str(spec)).build(dp_world_size=1, dp_rank=0, tokenizer=None, **kw)
    inputs, labels = next(iter(loader))
    assert set(inputs) == {"input", "positions", "source_ids", "loss_weights"}
    assert inputs["source_ids"].shape == labels.shape and inputs["loss_weights"].shape == labels.shape
    assert inputs["source_ids"].dtype == torch.int64 and inputs["loss_weights"].dtype == torch.float32
    # Where a label is ignored, its weight is 0; a trained label of dataset b weighs 2.
    ignored = labels == -100
    assert torch.all(inputs["loss_weights"][ignored] == 0)
    b = (inputs["source_ids"] == 1) & ~ignored
    assert b.any() and torch.all(inputs["loss_weights"][b] == 2.0)
