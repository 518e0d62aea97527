#!/usr/bin/env bash
# README command 2: build from scratch, run ctest, install the wheel, run the
# reports (build/reports/), then run the Python and conformance suites on
# the host device inline, and again with async streams and two devices (the
# soak runs there), the benchmarks (build/reports/benchmarks.json), and
# finally ctest again on an ASan + UBSan build (ci/sanitize.sh --ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
BUILD_DIR="${BUILD_DIR:-build/ci}"
JOBS="${JOBS:-2}"

bash ci/install_deps.sh

# One compiler for every build below: the wheel's build (scikit-build-core)
# would otherwise pick g++ where CMake picks c++, and ccache, which keys on
# the compiler's name, would compile everything a second time.
export CC="${CC:-cc}" CXX="${CXX:-c++}"

echo "== C++: configure, build, ctest (${BUILD_DIR})"
rm -rf "${BUILD_DIR}"
cmake -S . -B "${BUILD_DIR}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v "$PYTHON")"
cmake --build "${BUILD_DIR}" -j "${JOBS}"
ctest --test-dir "${BUILD_DIR}" --output-on-failure

echo "== Python: install the wheel"
"$PYTHON" -m pip install --disable-pip-version-check --no-build-isolation --no-deps -q .

# Gaps never fail the reports; failing to generate them does (set -e).
REPORTS_DIR="${REPORTS_DIR:-build/reports}"
echo "== reports: API gaps, operator coverage, op_db sweep (${REPORTS_DIR})"
env -u TORCH_INFINI_HOST_ASYNC -u TORCH_INFINI_HOST_DEVICES \
  "$PYTHON" tools/report_api_gaps.py --profile tests/conformance/api_profile.json \
  --markdown "${REPORTS_DIR}/api_gaps.md" --json "${REPORTS_DIR}/api_gaps.json"
env -u TORCH_INFINI_HOST_ASYNC -u TORCH_INFINI_HOST_DEVICES \
  "$PYTHON" tools/report_op_coverage.py \
  --markdown "${REPORTS_DIR}/op_coverage.md" --json "${REPORTS_DIR}/op_coverage.json"
# The op_db sweep, bounded as tests/conformance/test_op_db.py runs it (~15 s);
# `tools/op_db_sweep.py` without --max-samples runs every sample.
env -u TORCH_INFINI_HOST_ASYNC -u TORCH_INFINI_HOST_DEVICES \
  "$PYTHON" tools/op_db_sweep.py --max-samples 4 --jobs "${JOBS}" \
  --markdown "${REPORTS_DIR}/op_db.md" --json "${REPORTS_DIR}/op_db.json"

echo "== pytest: host device, inline streams, 1 device"
env -u TORCH_INFINI_HOST_ASYNC -u TORCH_INFINI_HOST_DEVICES \
  "$PYTHON" -m pytest -q -n "${JOBS}" tests/python tests/conformance

echo "== pytest: host device, async streams, 2 devices"
TORCH_INFINI_HOST_ASYNC=1 TORCH_INFINI_HOST_DEVICES=2 \
  "$PYTHON" -m pytest -q -n "${JOBS}" tests/python tests/conformance

# Ratios are reported, never asserted (a shared CI machine is noisy); a
# result that differs from the CPU fails the run.
echo "== benchmarks: host device, single thread (${REPORTS_DIR}/benchmarks.json)"
env -u TORCH_INFINI_HOST_ASYNC -u TORCH_INFINI_HOST_DEVICES \
  "$PYTHON" benchmarks/run.py --json "${REPORTS_DIR}/benchmarks.json"

echo "== charts (${REPORTS_DIR}/*.svg)"
"$PYTHON" tools/charts.py --benchmarks "${REPORTS_DIR}/benchmarks.json" \
  --op-coverage "${REPORTS_DIR}/op_coverage.json" --op-db "${REPORTS_DIR}/op_db.json" \
  --out "${REPORTS_DIR}"

echo "== sanitizers: ASan + UBSan build, ctest"
BUILD_DIR="${SANITIZE_BUILD_DIR:-build/asan}" bash ci/sanitize.sh --ctest
