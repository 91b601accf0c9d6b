"""PyTorch trainers as they run: TorchTitan's microbatches (a dp 4 run with local_batch_size
below the step's local rows, checkpointed through torch.distributed.checkpoint and resumed at
dp 2 with the same local_batch_size, gives the losses and batches of an uninterrupted dp 2
run), TorchTitan's validator on the spec's [validation] pass, and Hugging Face's label
convention (a tiny transformers model's loss on zephon's `hf_flat` batches equals its loss on
the same documents collated by DataCollatorWithFlattening).

TorchTitan's own Trainer does not run here: `torchtitan.tools.utils.get_device_info()` takes
`_get_available_device_type() or "cuda"`, so on a machine without an accelerator it builds the
model and its memory monitor for "cuda" and fails. The loop below does what its trainer does
with a data loader: build it from the config with dp rank and size and the trainer's sizes,
iterate microbatches, accumulate gradients over a step, all-reduce them, step the optimizer,
and save and load the loader's state under "dataloader" with DCP.

Run where torch, torchdata, torchtitan and transformers are installed (scripts/test-python.sh).
"""

from __future__ import annotations

import importlib
import json
import os
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch") if not os.environ.get("ZEPHON_REQUIRE_TORCH") else importlib.import_module("torch")
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import zephon_rs  # noqa: E402
import zephon_rs.torch as zt  # noqa: E402
from conftest import text_spec  # noqa: E402

VOCAB = 50257


def titan(spec: str, world: int, rank: int, local_batch_size: int, **config):
    """The adapter as TorchTitan builds it, with the trainer's sizes."""
    T = zt.TitanDataLoader
    if "repeat" in T.Config.__dataclass_fields__:
        if "infinite" in config:
            config["repeat"] = config.pop("infinite")
        kw = dict(max_context_length=512, num_tokens_per_batch=local_batch_size * 512)
    else:
        kw = dict(seq_len=512, local_batch_size=local_batch_size, snapshot_every_n_steps=1)
    return T.Config(spec=spec, **config).build(dp_world_size=world, dp_rank=rank, tokenizer=None, **kw)


class TinyLM(torch.nn.Module):
    """Embedding, one linear layer: enough for a loss that depends on every earlier step."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(VOCAB, 16)
        self.out = torch.nn.Linear(16, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(ids))


def trainer_worker(rank: int, world: int, job: dict) -> None:
    """What TorchTitan's trainer does with its data loader, per rank."""
    dist.init_process_group("gloo", init_method=f"file://{job['pg']}", rank=rank, world_size=world)
    torch.use_deterministic_algorithms(True)
    loader = titan(job["spec"], world, rank, job["local_batch_size"])
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    states = {"dataloader": loader, "model": model, "optim": opt}
    if job.get("resume"):
        dcp.load(states, checkpoint_id=job["resume"])
    it = iter(loader)
    out = []
    for _ in range(job["steps"]):
        opt.zero_grad()
        loss_sum = torch.zeros(())
        count = torch.zeros(())
        for _ in range(loader.microbatches_per_step):
            inputs, labels = next(it)
            logits = model(inputs["input"])
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100, reduction="sum")
            loss.backward()
            loss_sum += loss.detach()
            count += (labels != -100).sum()
        # The step's loss and gradient over every rank's tokens, as FSDP / DDP make them.
        dist.all_reduce(loss_sum)
        dist.all_reduce(count)
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= count
        opt.step()
        out.append({"loss": (loss_sum / count).item(),
                    "lanes": [(lane, d.hex()) for lane, d in loader.last_step.lane_digests()]})
    if job.get("save"):
        dcp.save(states, checkpoint_id=job["save"])
    Path(job["out"]).with_suffix(f".{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()


def run(world: int, job: dict, tmp: Path, tag: str) -> tuple[list[float], list[str]]:
    job = dict(job, pg=str(tmp / f"pg-{tag}"), out=str(tmp / f"{tag}.json"))
    mp.start_processes(trainer_worker, args=(world, job), nprocs=world, start_method="spawn", join=True)
    ranks = [json.loads(Path(job["out"]).with_suffix(f".{r}.json").read_text()) for r in range(world)]
    losses = [ranks[0][s]["loss"] for s in range(job["steps"])]
    assert all(r[s]["loss"] == losses[s] for r in ranks for s in range(job["steps"])), "ranks agree on the loss"
    prints = [zephon_rs.step_fingerprint([(lane, bytes.fromhex(d)) for r in ranks for lane, d in r[s]["lanes"]])
              for s in range(job["steps"])]
    return losses, prints


def test_dp4_with_small_microbatches_resumed_at_dp2_trains_as_an_uninterrupted_dp2_run(tmp_path, spec_file):
    spec = str(spec_file)  # 16 rows a step: 4 a rank at dp 4, 8 at dp 2
    want_losses, want_prints = run(2, {"spec": spec, "steps": 4, "local_batch_size": 2}, tmp_path, "dp2")
    head = run(4, {"spec": spec, "steps": 2, "local_batch_size": 2, "save": str(tmp_path / "ckpt")}, tmp_path, "dp4")
    tail = run(2, {"spec": spec, "steps": 2, "local_batch_size": 2, "resume": str(tmp_path / "ckpt")}, tmp_path,
               "resume")
    assert head[1] + tail[1] == want_prints, "the same batches, step by step"
    losses = head[0] + tail[0]
    assert all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(losses, want_losses)), (losses, want_losses)


def test_titan_sizes_and_checkpoints_are_checked(tmp_path, data):
    spec = tmp_path / "run.toml"
    spec.write_text(text_spec(data, lanes=8, rows=16))
    loader = titan(str(spec), 2, 0, 2)
    assert loader.microbatches_per_step == 4
    it = iter(loader)
    next(it)
    with pytest.raises(RuntimeError, match="between microbatches: step 0 has 4 microbatches .* 1 were taken"):
        loader.state_dict()
    for _ in range(3):
        next(it)
    assert loader.state_dict()["zephon"]["step"] == 1
    with pytest.raises(ValueError, match="divides 8"):
        titan(str(spec), 2, 0, 3)
    ramp = tmp_path / "ramp.toml"
    ramp.write_text(text_spec(data, lanes=8, rows=16).replace("rows_per_step = 16\n", "")
                    + "\n[schedule]\nrows_per_step = [[0, 16], [50, 32]]\n")
    with pytest.raises(ValueError, match="change at step 50"):
        titan(str(ramp), 2, 0, 2)


def test_the_validator_reads_the_validation_pass_and_ends_together(tmp_path, data):
    spec = tmp_path / "run.toml"
    validation = textwrap.dedent(f"""
        [validation]
        rows_per_step = 16
        [[validation.dataset]]
        name = "held-out"
        path = "{data}/corpora/a-exact/jsonl/part-00001.jsonl"
        """)
    spec.write_text(text_spec(data, lanes=8, rows=16) + validation)
    counts = []
    for rank in range(2):
        v = titan(str(spec), 2, rank, 4, infinite=False)
        counts.append(sum(1 for _ in v))
        assert v.state_dict() == {}
    assert counts[0] == counts[1] > 0, "every rank ends after the same step"
    plain = tmp_path / "plain.toml"
    plain.write_text(text_spec(data, lanes=8, rows=16))
    with pytest.raises(zephon_rs.SpecError, match=r"no \[validation\]"):
        titan(str(plain), 2, 0, 4, infinite=False)


def test_hf_flat_batches_give_the_loss_of_datacollatorwithflattening(data, tmp_path):
    transformers = pytest.importorskip("transformers") if not os.environ.get("ZEPHON_REQUIRE_TORCH") else \
        importlib.import_module("transformers")
    spec = tmp_path / "run.toml"
    spec.write_text(text_spec(data, lanes=2, rows=2, seq_len=256))
    step = next(zephon_rs.Loader(spec, dp_rank=0, dp_world_size=1))
    ours = step.batch(layout="hf_flat")
    assert ours.label_convention == "hf" and step.batch().label_convention == "next_token"
    assert set(ours) == {"input_ids", "labels", "position_ids"} and ours["input_ids"].shape[0] == 1
    # The same documents, one feature each, as DataCollatorWithFlattening takes them.
    ids, pos = ours["input_ids"][0], ours["position_ids"][0]
    starts = [i for i in range(len(ids)) if pos[i] == 0] + [len(ids)]
    features = [{"input_ids": ids[a:b].tolist()} for a, b in zip(starts, starts[1:])]
    theirs = transformers.DataCollatorWithFlattening(return_tensors="pt")(features)
    assert torch.equal(theirs["input_ids"], torch.from_numpy(ours["input_ids"]))
    assert torch.equal(theirs["position_ids"], torch.from_numpy(ours["position_ids"]))
    assert torch.equal(theirs["labels"], torch.from_numpy(ours["labels"]))
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        a = model(**{k: torch.from_numpy(v) for k, v in ours.items()}).loss
        b = model(input_ids=theirs["input_ids"], position_ids=theirs["position_ids"], labels=theirs["labels"]).loss
    assert torch.equal(a, b), (a, b)
    # zephon's own labels given to a model that shifts would train on the token after next:
    # the layouts differ exactly by that shift.
    z = step.batch(int64=True)
    hf = step.batch(layout="hf")
    inside = hf["labels"][:, 1:] != -100
    assert (z["labels"][:, :-1][inside] == hf["labels"][:, 1:][inside]).all()
