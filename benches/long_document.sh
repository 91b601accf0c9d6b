#!/usr/bin/env bash
# Memory of one huge document: a JSONL shard whose one row is SIZE_MB of real prose (corpus B
# repeated), among small ones, tokenized, split and packed at seq_len 256 through the CLI; the
# peak RSS (VmHWM) of each run is printed. Not a test: a measurement.
#
#   bash benches/long_document.sh [SIZE_MB ...]        (default: 20 200)
#
# Engines (TOKENIZERS, default "gpt2 llama2"): gpt2 (the exact fast path) and llama2 (the
# tokenizers crate, SentencePiece style, which holds ~75 bytes per input byte while it encodes:
# llama2 is skipped above 50 MB unless FORCE=1).
# Environment: ZEPHON_TESTDATA, ZEPHON_BIN, TOKENIZERS, FORCE.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${ZEPHON_TESTDATA:-$HOME/.cache/zephon-testdata}
BIN=${ZEPHON_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/zephon}
SIZES=("$@")
[[ ${#SIZES[@]} -gt 0 ]] || SIZES=(20 200)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

for mb in "${SIZES[@]}"; do
    mkdir -p "$TMP/d$mb"
    python3 - "$DATA/corpora/b/jsonl" "$TMP/d$mb/part.jsonl" "$mb" <<'PY'
import glob, json, sys
src, out, mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
texts = [json.loads(l)["text"] for p in sorted(glob.glob(src + "/*.jsonl")) for l in open(p)]
prose, target, parts = "", mb * 1_000_000, []
while sum(map(len, parts)) < target:
    parts.extend(texts)
big = "\n\n".join(parts)[:target]
with open(out, "w") as f:
    for i in range(3):
        f.write(json.dumps({"text": texts[i]}) + "\n")
    f.write(json.dumps({"text": big}) + "\n")
    for i in range(3, 6):
        f.write(json.dumps({"text": texts[i]}) + "\n")
PY
    for tok in ${TOKENIZERS:-gpt2 llama2}; do
        if [[ $tok == llama2 && $mb -gt 50 && ${FORCE:-0} != 1 ]]; then
            echo "$mb MB document, llama2: skipped (the tokenizers crate would hold ~$((mb * 75 / 1000)) GB; FORCE=1 runs it)"
            continue
        fi
        eos='eos = "<|endoftext|>"'
        [[ $tok == llama2 ]] && eos='eos = "</s>"'
        cat >"$TMP/s.toml" <<TOML
lanes = 2
rows_per_step = 4
[[dataset]]
name = "long"
path = "$TMP/d$mb"
weight = 1.0
[source]
order = "sequential"
exhaustion = "stop"
chunk_size = 8
[tokenize]
tokenizer = "$DATA/tokenizers/$tok/tokenizer.json"
$eos
[pack]
algorithm = "wrap"
seq_len = 256
[run]
threads = 2
tail = "partial"
TOML
        start=$(date +%s.%N)
        if "$BIN" run --spec "$TMP/s.toml" --quiet --report "$TMP/r.json" 2>"$TMP/err"; then
            python3 - "$TMP/r.json" "$mb" "$tok" "$start" <<'PY'
import json, sys, time
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:>5} MB document, {sys.argv[3]:<7}: {r['tokens']/1e6:8.1f} M tokens in {r['steps']} steps, "
      f"{time.time()-float(sys.argv[4]):6.1f} s, peak RSS {r['peak_rss_bytes']/2**20:7.0f} MiB")
PY
        else
            echo "$mb MB document, $tok: failed: $(tail -n 1 "$TMP/err")"
        fi
    done
done
