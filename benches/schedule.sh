#!/usr/bin/env bash
# Schedules on the real corpora (GPT-2, rows of 1024, 8 lanes, best-fit, ensure_mixture slack
# 4096, a 64-row shuffle split across the lanes):
#
# 1. The realised mixture per segment of a curriculum, against its targets: corpus B's long
#    documents and one-line documents of corpus A, 30 / 70 for STEPS/2 steps, then 70 / 30,
#    with G ramping ×2 twice, at L = 8 (16 → 64 rows a step) and L = 1 (2 → 8). `zephon run --report` counts every dataset's
#    tokens in each segment's steps from the rows' lineage and measures the transition after
#    each change (the fewest steps after which the bound L × (slack + seq_len) holds to the
#    segment's end) and the largest deviation after it.
# 2. Restore time against the step number: the same schedule stretched over 100,000 steps of
#    8 rows of 64 tokens; a checkpoint after step 10 and one after step 100,000; then ROUNDS
#    alternating restores of each, one step each: wall time and time to the first batch.
#
#   bash benches/schedule.sh [STEPS] [ROUNDS]     (default 600 steps, 3 rounds)
#
# Environment: ZEPHON_TESTDATA (default ~/.cache/zephon-testdata), ZEPHON_BIN, FAR (default
# 100000: the far checkpoint's step).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STEPS=${1:-600}
ROUNDS=${2:-3}
FAR=${FAR:-100000}
DATA=${ZEPHON_TESTDATA:-$HOME/.cache/zephon-testdata}
BIN=${ZEPHON_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/zephon}
(cd "$REPO" && bash scripts/fetch-testdata.sh >/dev/null && cargo build --release -q -p zephon-cli)

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/short"
python3 "$REPO/benches/one_line_docs.py" "$DATA" "$TMP/short/part-0.jsonl"

spec() { # rows_per_step-schedule shares-switch-step seq_len shuffle_total lanes
    cat <<SPEC
seed = 7
lanes = $5
[[dataset]]
name = "long"
path = "$DATA/corpora/b/jsonl"
[[dataset]]
name = "short"
path = "$TMP/short"
[tokenize]
tokenizer = "$DATA/tokenizers/gpt2/tokenizer.json"
eos = "<|endoftext|>"
[ensure_mixture]
slack_tokens = 4096
[pack]
algorithm = "best_fit"
seq_len = $3
pad_id = 50256
[shuffle]
buffer_total = $4
[schedule]
rows_per_step = $1
shares = [[0, { long = 0.3, short = 0.7 }], [$2, { long = 0.7, short = 0.3 }]]
SPEC
}

segments() { # lanes rows-per-lane
    local l=$1 r=$2
    echo "-- L = $l: G $((l * r)) → $((2 * l * r)) → $((4 * l * r)) rows at steps $((STEPS / 4)) and $((3 * STEPS / 4)), shuffle buffer 64 rows a lane"
    spec "[[0, $((l * r))], [$((STEPS / 4)), $((2 * l * r))], [$((3 * STEPS / 4)), $((4 * l * r))]]" $((STEPS / 2)) 1024 $((64 * l)) "$l" \
        > "$TMP/curriculum-$l.toml"
    "$BIN" run --spec "$TMP/curriculum-$l.toml" --steps "$STEPS" --quiet --world-size 1 --rank 0 --report "$TMP/curriculum-$l.json"
    python3 - "$TMP/curriculum-$l.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{'segment':>14} {'targets':>13} {'delivered':>13} {'transition':>10} {'after it':>13} {'worst':>8} {'bound':>7}")
for g in r["segments"]:
    pct = lambda v: " / ".join(f"{100 * x:.1f}" for x in v)
    t = g["transition_steps"]
    print(f"{g['from_step']:>6}..{g['to_step']:<7} {pct(g['targets']):>13} {pct(g['shares']):>13} "
          f"{'-' if t is None else t:>10} {pct(g['shares_after_transition']):>13} {g['max_deviation_tokens']:>8} {g['bound_tokens']:>7}")
print(f"tokens/s {r['tokens_per_s']:.0f}, dropped by ensure_mixture: "
      f"{sum(d['dropped_tokens'] for d in r['data']['datasets'])} tokens")
EOF
}

echo "== 1. the realised mixture per segment ($STEPS steps; shares 30 / 70 switch to 70 / 30 at step $((STEPS / 2)))"
segments 8 2
segments 1 2

echo
echo "== 2. restore time at step 10 and at step $FAR of one schedule ($ROUNDS alternating rounds)"
spec "[[0, 8], [$((FAR / 2)), 16]]" $((FAR * 3 / 5)) 64 8 8 > "$TMP/far.toml"
W=(--world-size 1 --rank 0)
"$BIN" run --spec "$TMP/far.toml" --steps 10 --quiet "${W[@]}" --checkpoint-at 10 --checkpoint-dir "$TMP/ck"
start=$(date +%s.%N)
"$BIN" run --spec "$TMP/far.toml" --steps "$FAR" --quiet "${W[@]}" --checkpoint-at "$FAR" --checkpoint-dir "$TMP/ck"
echo "(the run to step $FAR took $(python3 -c "import time; print(f'{time.time() - $start:.0f}')") s)"
for round in $(seq 1 "$ROUNDS"); do
    for at in 10 "$FAR"; do
        d=$(printf '%s/ck/step-%08d' "$TMP" "$at")
        s=$(date +%s.%N)
        "$BIN" run --spec "$TMP/far.toml" --steps $((at + 1)) --quiet "${W[@]}" --resume-from "$d" --report "$TMP/r.json"
        e=$(date +%s.%N)
        python3 - "$TMP/r.json" "$at" "$s" "$e" "$round" "$(du -sb "$d" | cut -f1)" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"round {sys.argv[5]}: restore at step {int(sys.argv[2]):>7}: wall {float(sys.argv[4]) - float(sys.argv[3]):.2f} s, "
      f"first batch after {r['ttfb_s']:.3f} s, checkpoint {int(sys.argv[6])} bytes")
EOF
    done
done
