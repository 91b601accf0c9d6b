#!/usr/bin/env bash
# Lanes as many as rows: L = G = 1024 against L = 8, 1024 rows of 1024 tokens per step, the
# same shuffle buffer for the whole run (`buffer_total = 32768`, split across the lanes), in
# three settings: filled up front; warming up (`warm_up = true`, for the shuffle and the
# packer); warming up with the packer's open rows also sized for the whole run
# (`bins_total = 4096`: 512 a lane at L = 8, 4 at L = 1024, against 64 a lane otherwise).
# Prints time to the first batch, the time of 3 steps, the peak RSS and the fill of each run,
# ROUNDS times (default 2), alternating. A measurement, not a test.
#
#   bash benches/lanes_1024.sh [ROUNDS]
#
# Environment: ZEPHON_TESTDATA (default ~/.cache/zephon-testdata), ZEPHON_BIN.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${ZEPHON_TESTDATA:-$HOME/.cache/zephon-testdata}
BIN=${ZEPHON_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/zephon}
if [[ -z ${ZEPHON_BIN:-} ]]; then
    (cd "$REPO" && bash scripts/fetch-testdata.sh && cargo build --release -q -p zephon-cli)
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

for round in $(seq 1 "${1:-2}"); do
for mode in filled warm_up bins_total; do
    warm=$([[ $mode == filled ]] && echo false || echo true)
    bins=$([[ $mode == bins_total ]] && echo "bins_total = 4096" || echo "")
    for lanes in 8 1024; do
        cat >"$TMP/spec.toml" <<EOF
seed = 1
lanes = $lanes
rows_per_step = 1024
[[dataset]]
name = "a"
path = "$DATA/corpora/a/jsonl"
share = 0.5
[[dataset]]
name = "b"
path = "$DATA/corpora/b/jsonl"
share = 0.5
[tokenize]
tokenizer = "$DATA/tokenizers/gpt2/tokenizer.json"
eos = "<|endoftext|>"
[pack]
algorithm = "best_fit"
seq_len = 1024
pad_id = 50256
warm_up = $warm
$bins
[shuffle]
buffer_total = 32768
warm_up = $warm
[run]
threads = 2
EOF
        "$BIN" run --spec "$TMP/spec.toml" --steps 3 --world-size 1 --rank 0 --quiet --report "$TMP/r.json" >/dev/null
        python3 - "$TMP/r.json" "$lanes" "$mode" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"L = {sys.argv[2]:>4}, {sys.argv[3]:<10}: first batch {r['ttfb_s']:5.2f} s, "
      f"3 steps {r['elapsed_s']:5.2f} s, peak RSS {r['peak_rss_bytes'] >> 20:5d} MiB, fill {r['fill']:.4f}")
PY
    done
done
done
