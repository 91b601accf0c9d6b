#!/usr/bin/env python3
"""Generate a synthetic JSONL corpus for the peer harness.

Rows look like ``{"id": "...", "text": "...", "source": "..."}``. Text is built
from a fixed pseudo-English vocabulary so that a BPE tokenizer produces a
realistic number of tokens per word (roughly 1.3 for GPT-2).

Examples:
    gen_corpus.py --out /tmp/corpus_a --kind short --docs 2000 --files 4
    gen_corpus.py --out /tmp/corpus_b --kind long  --docs 200  --files 2
"""

from __future__ import annotations

import argparse
import json
import os
import random

_SYLLABLES = (
    "ka to ri sen mar lo pe qua vin del ost ra un ter bis pol am ex gra "
    "fen dor lu mi ca ne so ti ha be re wo zu ly pri con stan tion ment"
).split()


def _vocab(rng: random.Random, size: int = 4000) -> list[str]:
    words = set()
    while len(words) < size:
        n = rng.choice((1, 1, 2, 2, 2, 3, 3, 4))
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(n)))
    return sorted(words)


def _doc(rng: random.Random, vocab: list[str], n_words: int) -> str:
    out: list[str] = []
    sentence = 0
    for i in range(n_words):
        w = vocab[min(int(rng.paretovariate(1.1)) - 1, len(vocab) - 1)] if rng.random() < 0.5 else rng.choice(vocab)
        if sentence == 0:
            w = w.capitalize()
        out.append(w)
        sentence += 1
        if sentence > rng.randint(6, 24):
            out[-1] += rng.choice((".", ".", ".", "?", "!"))
            sentence = 0
            if rng.random() < 0.15 and i + 1 < n_words:
                out[-1] += "\n\n"
    return " ".join(out).replace("\n\n ", "\n\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--kind", choices=("short", "long"), required=True)
    ap.add_argument("--docs", type=int, required=True, help="total documents")
    ap.add_argument("--files", type=int, default=1, help="number of .jsonl shards")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = random.Random(args.seed * 1000003 + (0 if args.kind == "short" else 1))
    vocab = _vocab(random.Random(12345))
    lo, hi = (40, 400) if args.kind == "short" else (1200, 6000)
    os.makedirs(args.out, exist_ok=True)
    per_file = [args.docs // args.files + (1 if i < args.docs % args.files else 0) for i in range(args.files)]
    doc_id = 0
    for fi, n in enumerate(per_file):
        path = os.path.join(args.out, f"part-{fi:05d}.jsonl")
        with open(path, "w", encoding="utf-8") as fh:
            for _ in range(n):
                n_words = rng.randint(lo, hi)
                row = {"id": f"{args.kind}-{doc_id}", "text": _doc(rng, vocab, n_words), "source": args.kind}
                fh.write(json.dumps(row) + "\n")
                doc_id += 1
    print(f"wrote {doc_id} docs to {args.out} in {args.files} file(s)")


if __name__ == "__main__":
    main()
