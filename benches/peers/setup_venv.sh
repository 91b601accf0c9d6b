#!/usr/bin/env bash
# Create the peer venv used by peer_zephon.py / peer_grain.py.
# Versions are the ones the harness was drafted and smoke-tested against.
set -euo pipefail
VENV=${VENV:-/root/.cache/zephon-peers/venv}
python3.11 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q zephon==0.2.0 grain==0.2.18 tokenizers==0.23.3 transformers==5.24.0
"$VENV/bin/python" -c "import zephon, grain, tokenizers, transformers; print('zephon', zephon.__version__, 'grain', grain.__version__, 'tokenizers', tokenizers.__version__, 'transformers', transformers.__version__)"
