#!/usr/bin/env bash
# Vision-language chat through `zephon bench`: the 43 conversations over the captioned photos
# (chat/vlm.jsonl, 61 images up to 5640 × 3172), Qwen2.5's tokenizer and TRL's Qwen2.5-VL
# training template, images at Qwen2-VL's dynamic resolution (the `qwen2_vl` preset: up to
# 12,845,056 pixels, as the Hugging Face processor), best-fit rows of 4096, 8 lanes, 8 rows a
# step, the spec's threads. Prints the bench JSON's headline figures and the time per stage.
#
#   bash benches/vlm_chat.sh [STEPS] [ROUNDS]     (default 30 steps, 3 rounds)
#
# Environment: ZEPHON_TESTDATA (default ~/.cache/zephon-testdata), ZEPHON_BIN,
# MAX_PIXELS (the preset's pixel budget, to see what it costs).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STEPS=${1:-30}
ROUNDS=${2:-3}
DATA=${ZEPHON_TESTDATA:-$HOME/.cache/zephon-testdata}
BIN=${ZEPHON_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/zephon}
(cd "$REPO" && bash scripts/fetch-testdata.sh >/dev/null && cargo build --release -q -p zephon-cli)

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pixels=${MAX_PIXELS:+dynamic_pixels = [3136, $MAX_PIXELS]}
cat >"$TMP/vlm_chat.toml" <<SPEC
seed = 9
lanes = 8
rows_per_step = 8
[[dataset]]
name = "photos"
path = "$DATA/chat/vlm.jsonl"
weight = 1.0
images = "images"
[images]
preset = "qwen2_vl"
$pixels
[chat]
tokenizer = "$DATA/tokenizers/qwen2_5/tokenizer.json"
template = "$DATA/chat/templates/qwen2_5_vl_training.jinja"
image_marker = "<|vision_start|><|image_pad|><|vision_end|>"
image_token = "<|image_pad|>"
image_start = "<|vision_start|>"
image_end = "<|vision_end|>"
[pack]
algorithm = "best_fit"
bins = 4
seq_len = 4096
pad_id = 151643
[run]
threads = 2
SPEC
echo "spec:"
sed 's/^/    /' "$TMP/vlm_chat.toml"
"$BIN" bench --spec "$TMP/vlm_chat.toml" --steps "$STEPS" --checkpoint-at $((STEPS / 3)) --rounds "$ROUNDS" \
    --json-out "$TMP/bench.json" >/dev/null 2>"$TMP/bench.log" || { cat "$TMP/bench.log" >&2; exit 1; }
python3 - "$TMP/bench.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"tokens/s (median of {len(d['rounds'])} fresh runs, steady): {d['tokens_per_s']:,.0f}")
print(f"tokens/s overall (from process start): {d['tokens_per_s_overall']:,.0f}")
print(f"tokens: {d['tokens']:,} in {d['steps']} steps; fill {d['fill']:.3f}")
print(f"time to first batch: {d['ttfb_s']:.2f} s fresh, {d['resume_ttfb_s']:.2f} s after a restore")
print(f"checkpoint: {d['checkpoint_bytes']:,} bytes; peak RSS {d['peak_rss_bytes'] / 2**20:,.0f} MiB")
print("thread time by stage (first run):")
for s in d["time_by_stage"]:
    print(f"    {s['name']:>9} ({s['part']}): {s['seconds']:8.2f} s  {100 * s['of_threads_wall']:5.1f} % of threads × wall")
PY
