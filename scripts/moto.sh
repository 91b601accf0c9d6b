#!/usr/bin/env bash
# Installs an S3 server that nobody here wrote, for the object-storage tests: moto's server
# (pinned, pure Python) in a cached venv, and prints the path of its `moto_server` command.
#
#   bash scripts/moto.sh [VENV]     (default ${XDG_CACHE_HOME:-~/.cache}/zephon-moto)
#
# scripts/test.sh exports it as ZEPHON_MOTO_SERVER; the tests start a server of their own on
# a free loopback port each.
set -euo pipefail
VENV=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/zephon-moto}
PIN="moto[server]==5.2.5"
if [ ! -x "$VENV/bin/moto_server" ] || ! grep -qxF "$PIN" "$VENV/.pin" 2>/dev/null; then
    echo "moto.sh: installing $PIN into $VENV" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "$PIN"
    echo "$PIN" > "$VENV/.pin"
fi
echo "$VENV/bin/moto_server"
