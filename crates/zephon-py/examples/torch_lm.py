"""A tiny causal language model trained with PyTorch on zephon's packed rows, three ways:

1. zephon at dp size 1, for N steps;
2. zephon at dp size 4 (four gloo processes, gradients summed), checkpointed at step N/2 with
   `torch.distributed.checkpoint` (the loader's state under "dataloader"), resumed at dp size 2;
3. the same two runs with a DistributedSampler-style loader: one seeded shuffle of the
   documents, rank r of W takes documents r, r + W, ... and packs its own rows; resumed at
   W = 2 by skipping the documents the new ranks would have read.

zephon's two curves are one curve (the bytes of every step are equal; the losses differ only by
float summation order); the DistributedSampler curves part at the first step. Writes a CSV of
every step's loss and, with matplotlib, a plot.

    python torch_lm.py --steps 200 --out docs/torch_loss_curves   (needs the fetched test data)
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
import torch.nn.functional as F

import zephon_rs
from zephon_rs.torch import to_tensors

SEQ, ROWS, LANES = 128, 8, 8
VOCAB = 4096  # GPT-2 numbers tokens roughly by frequency: the rest share the last id
DIM, LR = 64, 3e-3


def spec_text(data: Path) -> str:
    return f"""seed = 11
lanes = {LANES}
rows_per_step = {ROWS}
[[dataset]]
name = "a"
path = "{data}/corpora/a/jsonl"
weight = 1.0
[source]
chunk_size = 16
[tokenize]
tokenizer = "{data}/tokenizers/gpt2/tokenizer.json"
eos = "<|endoftext|>"
[pack]
algorithm = "wrap"
seq_len = {SEQ}
pad_id = 50256
[shuffle]
buffer = 4
[run]
threads = 1
"""


class TinyLM(torch.nn.Module):
    """Embeddings, one causal self-attention layer masked to each document, an MLP, tied head."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Parameter(torch.randn(VOCAB, DIM, generator=g) * 0.02)
        self.qkv = torch.nn.Parameter(torch.randn(DIM, 3 * DIM, generator=g) * 0.02)
        self.mlp = torch.nn.Parameter(torch.randn(DIM, DIM, generator=g) * 0.02)

    def forward(self, ids: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        x = self.emb[ids.clamp(max=VOCAB - 1)]
        q, k, v = (x @ self.qkv).chunk(3, dim=-1)
        t = ids.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        same = segments[:, :, None] == segments[:, None, :]
        mask = (causal & same & (segments[:, :, None] > 0))[:, None]
        # Padding attends to itself only, so that no row of the mask is empty.
        mask = mask | torch.eye(t, dtype=torch.bool)
        x = x + F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], attn_mask=mask)[:, 0]
        x = x + torch.tanh(x @ self.mlp)
        return x @ self.emb.T


def step_loss(model: TinyLM, batch: dict, global_tokens: int) -> torch.Tensor:
    """The step's summed token loss over its global token count (the same normalisation at
    every dp size)."""
    labels = batch["labels"].clamp(max=VOCAB - 1).masked_fill(batch["labels"] < 0, -100)
    logits = model(batch["input_ids"], batch["segment_ids"])
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100, reduction="sum") / global_tokens


def train(batches, model, opt, world: int) -> list[float]:
    losses = []
    for batch in batches:
        local = torch.tensor([(batch["labels"] >= 0).sum().item()], dtype=torch.float64)
        if world > 1:
            dist.all_reduce(local)
        loss = step_loss(model, batch, int(local.item()))
        opt.zero_grad()
        loss.backward()
        total = loss.detach().reshape(1).double()
        if world > 1:
            for p in model.parameters():
                dist.all_reduce(p.grad)
            dist.all_reduce(total)
        opt.step()
        losses.append(total.item())
    return losses


def zephon_batches(loader: zephon_rs.Loader, steps: int):
    for _ in range(steps):
        yield to_tensors(next(loader).batch(int64=True))


class Sampled:
    """The DistributedSampler-style loader: a seeded shuffle of the documents, rank r of W
    takes every W-th from r, tokenizes and wrap-packs its own stream into rows."""

    def __init__(self, docs: list[list[int]], rank: int, world: int, skip_docs: int = 0) -> None:
        order = torch.randperm(len(docs), generator=torch.Generator().manual_seed(11)).tolist()
        self.docs = [docs[i] for i in order[skip_docs:]][rank::world]
        self.rows = ROWS // world

    consumed = 0
    """Documents this rank has read so far."""

    def batches(self, steps: int):
        stream, segs, seg, it = [], [], 1, iter(self.docs)
        for _ in range(steps):
            while len(stream) < self.rows * SEQ + 1:
                d = next(it)
                self.consumed += 1
                stream += d
                segs += [seg] * len(d)
                seg += 1
            n = self.rows * SEQ
            ids = torch.tensor(stream[:n]).reshape(self.rows, SEQ)
            nxt = torch.tensor(stream[1 : n + 1]).reshape(self.rows, SEQ)
            s = torch.tensor(segs[:n]).reshape(self.rows, SEQ)
            s_next = torch.tensor(segs[1 : n + 1]).reshape(self.rows, SEQ)
            labels = nxt.masked_fill(s_next != s, -100)
            stream, segs = stream[n:], segs[n:]
            yield {"input_ids": ids, "segment_ids": s, "labels": labels}


def corpus_tokens(data: Path, limit: int = 6000) -> list[list[int]]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(data / "tokenizers/gpt2/tokenizer.json"))
    docs = []
    for f in sorted((data / "corpora/a/jsonl").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            docs.append(tok.encode(json.loads(line)["text"]).ids + [50256])
            if len(docs) == limit:
                return docs
    return docs


def worker(rank: int, world: int, job: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{job['pg']}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    out = Path(job["out"])
    if job["kind"] == "zephon":
        loader = zephon_rs.Loader(job["spec"], dp_rank=rank, dp_world_size=world)
        if job.get("resume"):
            states = {"dataloader": loader}
            dcp.load(states, checkpoint_id=job["resume"])
            saved = torch.load(Path(job["resume"]) / "trainer.pt")
            model.load_state_dict(saved["model"]), opt.load_state_dict(saved["opt"])
        losses = train(zephon_batches(loader, job["steps"]), model, opt, world)
        if job.get("save"):
            dcp.save({"dataloader": loader}, checkpoint_id=job["save"])
            if rank == 0:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, Path(job["save"]) / "trainer.pt")
    else:
        docs = torch.load(job["docs"])
        skip = 0
        if job.get("resume"):
            saved = torch.load(Path(job["resume"]) / "trainer.pt")
            model.load_state_dict(saved["model"]), opt.load_state_dict(saved["opt"])
            skip = saved["documents_read"]
        sampled = Sampled(docs, rank, world, skip)
        losses = train(sampled.batches(job["steps"]), model, opt, world)
        # What a sampler-based resume can know: how many documents all ranks read together.
        read = torch.tensor([sampled.consumed])
        dist.all_reduce(read)
        if job.get("save") and rank == 0:
            Path(job["save"]).mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "documents_read": skip + int(read.item())},
                       Path(job["save"]) / "trainer.pt")
    if rank == 0:
        out.write_text(json.dumps(losses))
    dist.destroy_process_group()


def launch(world: int, job: dict, tmp: Path) -> list[float]:
    job = dict(job, pg=str(tmp / f"pg-{os.urandom(4).hex()}"), out=str(tmp / f"losses-{os.urandom(4).hex()}.json"))
    mp.start_processes(worker, args=(world, job), nprocs=world, start_method="spawn", join=True)
    return json.loads(Path(job["out"]).read_text())


def curves(data: Path, steps: int, tmp: Path) -> dict[str, list[float]]:
    """The four loss curves: zephon at 1 and at 4 -> 2, the sampler at 1 and at 4 -> 2."""
    torch.set_num_threads(1)
    spec = tmp / "lm.toml"
    spec.write_text(spec_text(data))
    half = steps // 2
    z1 = launch(1, {"kind": "zephon", "spec": str(spec), "steps": steps}, tmp)
    z4 = launch(4, {"kind": "zephon", "spec": str(spec), "steps": half, "save": str(tmp / "z-ckpt")}, tmp)
    z2 = launch(2, {"kind": "zephon", "spec": str(spec), "steps": steps - half, "resume": str(tmp / "z-ckpt")}, tmp)
    docs = tmp / "docs.pt"
    torch.save(corpus_tokens(data), docs)
    n1 = launch(1, {"kind": "sampler", "docs": str(docs), "steps": steps}, tmp)
    n4 = launch(4, {"kind": "sampler", "docs": str(docs), "steps": half, "save": str(tmp / "n-ckpt")}, tmp)
    # At W = 2 the new ranks skip the documents the old ones read, and deal the rest anew.
    n2 = launch(2, {"kind": "sampler", "docs": str(docs), "steps": steps - half, "resume": str(tmp / "n-ckpt")}, tmp)
    return {"zephon_w1": z1, "zephon_w4_w2": z4 + z2, "sampler_w1": n1, "sampler_w4_w2": n4 + n2}


def write(c: dict[str, list[float]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", *c])
        for i in range(len(c["zephon_w1"])):
            w.writerow([i, *(v[i] for v in c.values())])
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: wrote the CSV only", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(9, 4.5))
    styles = {"zephon_w1": ("tab:blue", 3.0, "zephon, W=1"), "zephon_w4_w2": ("tab:orange", 1.2, "zephon, W=4 → 2"),
              "sampler_w1": ("grey", 1.0, "DistributedSampler, W=1"),
              "sampler_w4_w2": ("tab:red", 1.0, "DistributedSampler, W=4 → 2")}
    for k, (color, width, label) in styles.items():
        ax.plot(c[k], color=color, linewidth=width, label=label)
    ax.axvline(len(c["zephon_w1"]) // 2, color="black", linestyle="--", linewidth=0.8, label="resume")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("The same model, the same data: resumed at another dp size")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)


def summary(c: dict[str, list[float]]) -> dict[str, float]:
    rel = lambda a, b: max(abs(x - y) / abs(x) for x, y in zip(a, b))
    return {"zephon_max_rel_diff": rel(c["zephon_w1"], c["zephon_w4_w2"]),
            "sampler_max_rel_diff": rel(c["sampler_w1"], c["sampler_w4_w2"])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--out", type=Path, default=Path("docs/torch_loss_curves"))
    p.add_argument("--data", type=Path, default=Path(os.environ.get("ZEPHON_TESTDATA", Path.home() / ".cache/zephon-testdata")))
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        c = curves(a.data, a.steps, Path(tmp))
    write(c, a.out)
    s = summary(c)
    print(json.dumps(s, indent=1))
    for i in range(0, a.steps, max(1, a.steps // 8)):
        print(f"step {i:4}: zephon {c['zephon_w1'][i]:.6f} {c['zephon_w4_w2'][i]:.6f}   "
              f"sampler {c['sampler_w1'][i]:.4f} {c['sampler_w4_w2'][i]:.4f}")


if __name__ == "__main__":
    main()
