#!/usr/bin/env bash
# Chat benchmark: conversations/s and tokens/s of our zephon (`[chat]`, the CLI) against
# Zephon 0.2.0's `Pipeline.tokenize_chat` (PyPI), on the same conversations (the test data's
# chat/conversations.jsonl), the same template (chat/templates/llama3_training.jinja, TRL's
# Llama-3.1 training template with {% generation %} blocks), the same tokenizer
# (tokenizers/llama3_1), the same best-fit packing into rows of 2048 tokens, 2 worker threads each
# and the same number of passes, run alternately (ours, theirs, ours, theirs, ...), medians reported.
# See bench_chat.py for the pipelines.
#
#   bash benches/peers/chat.sh [--no-build] [--quick] [bench_chat.py options]
#
#   --no-build       use target/release/zephon as it is (or $ZEPHON_BIN); no cargo
#   --quick          4 passes, 1 round (smoke test: the steady figures are not meaningful, the
#                    first batch comes only after about 1 M tokens are in the 512 open rows);
#                    writes under /tmp/zephon-chat-quick unless --out-dir is given
#   --passes N       passes over the 1,611 conversations (default 200: 102.8 M tokens; ours runs > 10 s)
#   --rounds N       timed runs of each system (default 3)
#   --peer-kinds L   Zephon 0.2.0's workers: thread, process or thread,process (default both:
#                    2 threads, then 2 processes, each round)
#   --quiet-wait S   wait up to S s before each run for other processes to go quiet (default 120)
#   --out-dir DIR    where chat-latest.{md,json} and raw/chat/ go (default benches/peers/results)
#
# Steps: 1. the peer venv (setup_venv.sh: ~/.cache/zephon-peers/venv, zephon==0.2.0 pinned), plus
# jinja2==3.1.6 (transformers renders chat templates with it; not a dependency of zephon 0.2.0
# nor of transformers); 2. the test data (scripts/fetch-testdata.sh, a no-op when current);
# 3. `cargo build --release -q -p zephon-cli` (unless --no-build); 4. bench_chat.py, which writes
# results/chat-latest.md and results/chat-latest.json.
# Environment: VENV, ZEPHON_TESTDATA, ZEPHON_BIN, CARGO_TARGET_DIR.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VENV=${VENV:-$HOME/.cache/zephon-peers/venv}
export VENV
CMDLINE="bash benches/peers/chat.sh${*:+ $*}"

BUILD=1 QUICK=0 OUT_GIVEN=0
PASS=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --no-build) BUILD=0 ;;
        --quick) QUICK=1 ;;
        --out-dir|--out-dir=*) OUT_GIVEN=1; PASS+=("$1") ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) PASS+=("$1") ;;
    esac
    shift
done
if [[ $QUICK == 1 ]]; then
    PASS=(--passes 4 --rounds 1 "${PASS[@]}")
    [[ $OUT_GIVEN == 1 ]] || PASS+=(--out-dir /tmp/zephon-chat-quick)
fi

log() { printf 'chat.sh: %s\n' "$*" >&2; }

# 1. Peer venv (pinned, idempotent), and jinja2 for transformers' apply_chat_template.
bash "$HERE/setup_venv.sh"
PY=$VENV/bin/python
if ! "$PY" -c 'import jinja2, sys; sys.exit(jinja2.__version__ != "3.1.6")' >/dev/null 2>&1; then
    log "installing jinja2==3.1.6 into $VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check jinja2==3.1.6 -c "$HERE/constraints.txt"
fi

# 2. Test data.
(cd "$REPO" && bash scripts/fetch-testdata.sh)

# 3. Our CLI.
ZEPHON_BIN=${ZEPHON_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/zephon}
if [[ $BUILD == 1 ]]; then
    log "cargo build --release -q -p zephon-cli"
    (cd "$REPO" && nice -n 10 cargo build --release -q -p zephon-cli)
fi
[[ -x $ZEPHON_BIN ]] || { log "no zephon binary at $ZEPHON_BIN (run without --no-build)"; exit 1; }

# 4. Measure and report.
exec "$PY" "$HERE/bench_chat.py" --python "$PY" --zephon-bin "$ZEPHON_BIN" --passes 200 \
    --peer-kinds thread,process --command "$CMDLINE" "${PASS[@]}"
