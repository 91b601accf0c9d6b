#!/usr/bin/env bash
# Lanes as many as rows: L = G = 1024 against L = 8, 1024 rows of 1024 tokens per step, the
# same shuffle buffer for the whole run (`buffer_total = 32768`, split across the lanes), in
# three settings: filled up front; warming up (`warm_up = true`, for the shuffle and the
# packer); warming up with the packer's open rows also sized for the whole run
# (`bins_total = 4096`: 512 a lane at L = 8, 4 at L = 1024, against 64 a lane otherwise).
# Prints time to the first batch, the time of 3 steps, the peak RSS and the fill of each run,
# ROUNDS times (default 2), alternating. Then the steady rate: the last setting over
# STEADY_STEPS steps (default 30), tokens/s after the first step at L = 1024 against L = 8,
# ROUNDS times, alternating, each round's ratio and the median. A measurement, not a test.
#
#   bash benches/lanes_1024.sh [ROUNDS]
#
# Environment: ZEPHON_TESTDATA (default ~/.cache/zephon-testdata), ZEPHON_BIN, STEADY_STEPS.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${ZEPHON_TESTDATA:-$HOME/.cache/zephon-testdata}
BIN=${ZEPHON_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/zephon}
if [[ -z ${ZEPHON_BIN:-} ]]; then
    (cd "$REPO" && bash scripts/fetch-testdata.sh && cargo build --release -q -p zephon-cli)
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ROUNDS=${1:-2}
STEADY_STEPS=${STEADY_STEPS:-30}

# The spec at $1 lanes, warming up ($2: true or false), with an extra [pack] line ($3).
write_spec() {
    cat >"$TMP/spec.toml" <<SPEC
seed = 1
lanes = $1
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
warm_up = $2
$3
[shuffle]
buffer_total = 32768
warm_up = $2
[run]
threads = 2
SPEC
}

for round in $(seq 1 "$ROUNDS"); do
    for mode in filled warm_up bins_total; do
        warm=$([[ $mode == filled ]] && echo false || echo true)
        bins=$([[ $mode == bins_total ]] && echo "bins_total = 4096" || echo "")
        for lanes in 8 1024; do
            write_spec "$lanes" "$warm" "$bins"
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

echo "== steady tokens/s over $STEADY_STEPS steps, warming up, bins_total = 4096: L = 1024 against L = 8"
ratios=""
for round in $(seq 1 "$ROUNDS"); do
    rates=""
    for lanes in 8 1024; do
        write_spec "$lanes" true "bins_total = 4096"
        "$BIN" run --spec "$TMP/spec.toml" --steps "$STEADY_STEPS" --world-size 1 --rank 0 --quiet \
            --report "$TMP/r.json" >/dev/null
        rates="$rates $(python3 -c "import json; print(json.load(open('$TMP/r.json'))['tokens_per_s'])")"
    done
    read -r at8 at1024 <<<"$rates"
    ratio=$(python3 -c "print(f'{$at1024 / $at8:.3f}')")
    ratios="$ratios $ratio"
    python3 -c "print(f'round $round: L = 8 {$at8 / 1e6:.2f} M tokens/s, L = 1024 {$at1024 / 1e6:.2f} M tokens/s: ratio $ratio')"
done
python3 -c "import statistics, sys; print('median ratio L = 1024 / L = 8:', statistics.median(map(float, sys.argv[1:])))" $ratios
