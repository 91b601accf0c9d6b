#!/usr/bin/env bash
# Clean build time of a third-party operator crate (examples/sentences, on zephon-operator
# alone) against the engine crate it would otherwise depend on (zephon-core): each built from
# nothing in its own empty target folder, ROUNDS times alternating, dev profile.
#
#   bash benches/report.sh operator_build -- bash benches/operator_build.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROUNDS=${1:-3}
echo "| round | crate | clean build (s) | crates compiled |"
echo "|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
    for crate in zephon-sentences zephon-core; do
        dir=$(mktemp -d)
        start=$(date +%s.%N)
        cargo build -q -p "$crate" --target-dir "$dir"
        end=$(date +%s.%N)
        n=$(find "$dir/debug/deps" -name '*.rlib' | wc -l)
        printf '| %s | %s | %.1f | %s |\n' "$r" "$crate" "$(echo "$end - $start" | bc)" "$n"
        rm -rf "$dir"
    done
done
