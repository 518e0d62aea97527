#!/usr/bin/env bash
# README command 2: build from scratch, run ctest, install the wheel, run the
# Python suite on the host device inline, then again with async streams and
# two devices.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
BUILD_DIR="${BUILD_DIR:-build/ci}"
JOBS="${JOBS:-2}"

bash ci/install_deps.sh

echo "== C++: configure, build, ctest (${BUILD_DIR})"
rm -rf "${BUILD_DIR}"
cmake -S . -B "${BUILD_DIR}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v "$PYTHON")"
cmake --build "${BUILD_DIR}" -j "${JOBS}"
ctest --test-dir "${BUILD_DIR}" --output-on-failure

echo "== Python: install the wheel"
"$PYTHON" -m pip install --disable-pip-version-check --no-build-isolation --no-deps -q .

echo "== pytest: host device, inline streams, 1 device"
env -u TORCH_INFINI_HOST_ASYNC -u TORCH_INFINI_HOST_DEVICES \
  "$PYTHON" -m pytest -q -n "${JOBS}" tests/python

echo "== pytest: host device, async streams, 2 devices"
TORCH_INFINI_HOST_ASYNC=1 TORCH_INFINI_HOST_DEVICES=2 \
  "$PYTHON" -m pytest -q -n "${JOBS}" tests/python
