#!/usr/bin/env bash
# The project's test command (README, second command): fetch and verify the real test data
# (cached; a few seconds when current), then run every test of the workspace.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export ZEPHON_TESTDATA=${ZEPHON_TESTDATA:-${XDG_CACHE_HOME:-$HOME/.cache}/zephon-testdata}
bash scripts/fetch-testdata.sh "$ZEPHON_TESTDATA"

# Tests that need the fetched data fail (not skip) when it is missing; this says so.
export ZEPHON_REQUIRE_TESTDATA=1

if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --no-fail-fast
else
    cargo test --workspace --no-fail-fast --lib --bins --tests --examples
fi
# nextest does not run doctests.
cargo test --workspace --doc
