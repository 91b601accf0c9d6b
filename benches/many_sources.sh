#!/usr/bin/env bash
# A mixture of a hundred sources (zephon_testkit::many_sources: about 90 one-line documents of
# corpus A per dataset, a 14 k-token document of corpus B in every tenth, token shares of 0.1 %
# to 1.8 % written with six decimals), GPT-2, ensure_mixture slack 4096, best-fit rows of 1024,
# 2 threads. For each configuration (lanes, rows a step, chunk_tokens) one run of 1,000 steps
# with a checkpoint after step 200, and runs of 50 and 200 steps: tokens/s, first batch, peak
# RSS, checkpoint size, the most ensure_mixture held, and after 50, 200 and 1,000 steps the
# largest distance of a dataset from its share (points), the mean relative distance and the
# datasets with no token.
#
#   bash benches/many_sources.sh        (bash benches/report.sh many_sources -- bash benches/many_sources.sh)
#
# Environment: ZEPHON_TESTDATA (default ~/.cache/zephon-testdata), ZEPHON_BIN.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export ZEPHON_TESTDATA=${ZEPHON_TESTDATA:-$HOME/.cache/zephon-testdata}
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
BIN=${ZEPHON_BIN:-$TARGET/release/zephon}
(cd "$REPO" && bash scripts/fetch-testdata.sh >/dev/null && cargo build --release -q -p zephon-cli -p zephon-testkit)

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

printf '%-28s %10s %8s %9s %10s %9s  %-26s %-26s %-26s\n' configuration "tokens/s" "first s" "peak MiB" "ckpt bytes" "held peak" \
    "after 50: worst/mean/zero" "after 200: worst/mean/zero" "after 1000: worst/mean/zero"
for config in "16 32" "16 32 128" "16 32 8192" "1 32" "256 256"; do
    set -- $config
    dir=$TMP/l$1-c${3:-default}
    "$TARGET/release/many-sources" "$dir" 100 "$1" "$2" ${3:-}
    for steps in 50 200 1000; do
        extra=()
        [[ $steps == 1000 ]] && extra=(--checkpoint-at 200 --checkpoint-dir "$dir/ckpt")
        "$BIN" run --spec "$dir/spec.toml" --steps "$steps" --quiet --world-size 1 --rank 0 \
            --report "$dir/r$steps.json" "${extra[@]}" 2>/dev/null
    done
    python3 - "$dir" "$1 lanes, $2 rows, chunk ${3:-2048}" <<'PY'
import json, sys
d, name = sys.argv[1], sys.argv[2]
def shares(n):
    r = json.load(open(f"{d}/r{n}.json"))
    sh = r["shares"]
    worst = max(abs(x["share"] - x["target"]) for x in sh) * 100
    mean = sum(abs(x["share"] - x["target"]) / x["target"] for x in sh) / len(sh) * 100
    zero = sum(1 for x in sh if x["tokens"] == 0)
    return r, f"{worst:.3f} pt / {mean:.1f} % / {zero}"
r, s1000 = shares(1000)
_, s50 = shares(50)
_, s200 = shares(200)
print(f"{name:<28} {r['tokens_per_s']:>10.0f} {r['ttfb_s']:>8.2f} {r['peak_rss_bytes'] / 2**20:>9.0f} "
      f"{r['checkpoint_bytes']:>10} {r['data']['held_tokens_peak']:>9}  {s50:<26} {s200:<26} {s1000:<26}")
PY
done
