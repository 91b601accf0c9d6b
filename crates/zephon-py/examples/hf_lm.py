"""Trains a tiny Hugging Face causal LM (`transformers.LlamaForCausalLM`) on a zephon spec's
batches in Hugging Face's layout: `step.batch(layout="hf_flat")` gives `input_ids`, `labels`
(the tokens themselves: the model shifts) and `position_ids` restarting at every document, one
row without padding, as `DataCollatorWithFlattening` makes it for FlashAttention's packed
sequences. zephon's default layout holds labels already shifted (`label_convention ==
"next_token"`): given to a model that shifts again it would train on the token after next.

    python examples/hf_lm.py SPEC [STEPS]
"""

from __future__ import annotations

import sys

import torch
import transformers

import zephon_rs


def main(spec: str, steps: int = 20) -> None:
    loader = zephon_rs.Loader(spec, dp_rank=0, dp_world_size=1)
    config = transformers.LlamaConfig(vocab_size=50257, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4,
                                      max_position_embeddings=loader.seq_len or 2048)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _, step in zip(range(steps), loader):
        batch = step.batch(layout="hf_flat")
        assert batch.label_convention == "hf"
        loss = model(**{k: torch.from_numpy(v) for k, v in batch.items()}).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step.index}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20)
