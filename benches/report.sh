#!/usr/bin/env bash
# Runs one benchmark command and writes its report to benches/results/NAME.md: the date, the
# machine, the commit and the command first, then everything the command printed. The
# benchmarks print their own figures; this keeps them with the facts needed to compare them.
#
#   bash benches/report.sh NAME -- COMMAND [ARGS...]
#   e.g. bash benches/report.sh lanes_1024 -- bash benches/lanes_1024.sh 3
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ $# -lt 3 || $2 != "--" ]]; then
    echo "usage: bash benches/report.sh NAME -- COMMAND [ARGS...]" >&2
    exit 2
fi
NAME=$1
shift 2
OUT=$REPO/benches/results/$NAME.md
TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//' || echo unknown)
mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
commit=$(git -C "$REPO" rev-parse --short HEAD)
git -C "$REPO" diff --quiet HEAD -- crates benches examples Cargo.toml Cargo.lock || commit="$commit (with uncommitted changes)"
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)

echo "benches/report.sh: running $*" >&2
status=0
(cd "$REPO" && "$@") 2>&1 | tee "$TMP" || status=$?

{
    echo "# $NAME"
    echo
    echo "- Date: $started"
    echo "- Machine: $(nproc) CPUs ($cpu), $mem RAM, Linux $(uname -r)"
    echo "- Commit: $commit"
    echo "- Command: \`$*\`"
    [[ $status -eq 0 ]] || echo "- Exit status: $status (the run failed; its output is below)"
    echo
    echo '```text'
    # Progress bars redraw with carriage returns; keep what each line ended as.
    sed 's/.*\r//' "$TMP"
    echo '```'
} > "$OUT"
echo "benches/report.sh: wrote $OUT" >&2
exit "$status"
