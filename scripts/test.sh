#!/usr/bin/env bash
# The project's test command (README, second command): fetch and verify the real test data
# (cached; a few seconds when current), then run every test of the workspace and of the
# Python wheel (scripts/test-python.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export ZEPHON_TESTDATA=${ZEPHON_TESTDATA:-${XDG_CACHE_HOME:-$HOME/.cache}/zephon-testdata}
bash scripts/fetch-testdata.sh "$ZEPHON_TESTDATA"

# The S3 server the object-storage tests start their own of (moto, from a cached venv).
ZEPHON_MOTO_SERVER=$(bash scripts/moto.sh)
export ZEPHON_MOTO_SERVER

# Tests that need the fetched data (or the S3 server) fail (not skip) when it is missing.
export ZEPHON_REQUIRE_TESTDATA=1

# The workspace's default members: every crate but the Python wheel, whose tests follow.
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --no-fail-fast
else
    cargo test --no-fail-fast --lib --bins --tests --examples
fi
# nextest does not run doctests.
cargo test --doc

bash scripts/test-python.sh
