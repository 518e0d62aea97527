#!/usr/bin/env bash
# README command 1: build and install the wheel, then run the main job (a
# small Llama trained and generating on infini:0) and check it against the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
bash ci/install_deps.sh
"$PYTHON" -m pip install --disable-pip-version-check --no-build-isolation --no-deps -q .
"$PYTHON" examples/llama.py
