#!/usr/bin/env bash
# What lanes cost: the same pipeline (A+B JSONL, GPT-2, EOS, wrap to 2048, 256 rows per
# global step, 512 packed rows of shuffle in total) at L = 8 and at L = 256, on one rank.
# Runs each twice, alternating, and prints tokens/s steady and overall, TTFB and peak RSS.
#
#   bash benches/lanes.sh [STEPS]      (default 40 steps = 21 M tokens per run)
#
# Environment: ZEPHON_TESTDATA (default ~/.cache/zephon-testdata), ZEPHON_BIN.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STEPS=${1:-40}
DATA=${ZEPHON_TESTDATA:-$HOME/.cache/zephon-testdata}
BIN=${ZEPHON_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/zephon}
(cd "$REPO" && bash scripts/fetch-testdata.sh && cargo build --release -q -p zephon-cli)

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

spec() { # lanes, shuffle buffer per lane
    cat <<EOF
seed = 1234
lanes = $1
rows_per_step = 256

[[dataset]]
name = "a"
path = "$DATA/corpora/a/jsonl"
share = 0.5
[[dataset]]
name = "b"
path = "$DATA/corpora/b/jsonl"
share = 0.5

[source]
chunk_size = 64
exhaustion = "repeat"

[tokenize]
tokenizer = "$DATA/tokenizers/gpt2/tokenizer.json"
eos = "<|endoftext|>"

[pack]
algorithm = "wrap"
seq_len = 2048
pad_id = 50256

[shuffle]
buffer = $2

[run]
threads = 2
EOF
}
spec 8 64 >"$TMP/lanes8.toml"
spec 256 2 >"$TMP/lanes256.toml"

printf '%-6s %-5s %14s %14s %8s %9s\n' lanes run "tok/s steady" "tok/s overall" "TTFB s" "RSS MiB"
for round in 1 2; do
    for lanes in 8 256; do
        "$BIN" run --spec "$TMP/lanes$lanes.toml" --steps "$STEPS" --quiet --report "$TMP/r.json"
        python3 - "$TMP/r.json" "$lanes" "$round" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<6} {sys.argv[3]:<5} {r['tokens_per_s']/1e6:13.2f}M {r['tokens_per_s_overall']/1e6:13.2f}M "
      f"{r['ttfb_s']:8.2f} {r['peak_rss_bytes']/2**20:9.0f}")
EOF
    done
done
