#!/usr/bin/env bash
# README command 2: build the project once from scratch (the wheel, whose
# build tree has the C++ tests), install it, run ctest in that tree, run the
# reports (build/reports/), then the Python and conformance suites on the
# host device inline, and again with async streams and two devices (the
# soak runs there), the benchmarks (build/reports/benchmarks.json), and
# finally ctest on an ASan + UBSan build (ci/sanitize.sh --ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
BUILD_DIR="${BUILD_DIR:-build/ci}"
JOBS="${JOBS:-2}"

# A step's heading, with the time since the start (CI's time limits).
step() { echo "== [$((SECONDS / 60))m$((SECONDS % 60))s] $*"; }

bash ci/install_deps.sh

# One compiler for every build below (scikit-build-core would pick g++ where
# CMake picks c++). ccache keys on paths relative to the checkout, so a
# rebuild in another clone of the same sources hits the cache.
export CC="${CC:-cc}" CXX="${CXX:-c++}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(pwd)}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"

step "build once: the wheel, installed; its build tree has the C++ tests (${BUILD_DIR})"
rm -rf "${BUILD_DIR}"
# -v: the compile's progress in the log (the longest step of a cold run).
CMAKE_BUILD_PARALLEL_LEVEL="${JOBS}" "$PYTHON" -m pip install --disable-pip-version-check \
  --no-build-isolation --no-deps -v -C build-dir="${BUILD_DIR}" \
  -C cmake.define.TORCH_INFINI_BUILD_TESTS=ON .
step "C++: ctest (${BUILD_DIR})"
ctest --test-dir "${BUILD_DIR}" --output-on-failure

# Gaps never fail the reports; failing to generate them does (set -e).
REPORTS_DIR="${REPORTS_DIR:-build/reports}"
step "reports: API gaps, operator coverage, op_db sweep (${REPORTS_DIR})"
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

step "pytest: host device, inline streams, 1 device"
env -u TORCH_INFINI_HOST_ASYNC -u TORCH_INFINI_HOST_DEVICES \
  "$PYTHON" -m pytest -q -n "${JOBS}" tests/python tests/conformance

step "pytest: host device, async streams, 2 devices"
TORCH_INFINI_HOST_ASYNC=1 TORCH_INFINI_HOST_DEVICES=2 \
  "$PYTHON" -m pytest -q -n "${JOBS}" tests/python tests/conformance

# Ratios are reported, never asserted (a shared CI machine is noisy); a
# result that differs from the CPU fails the run.
step "benchmarks: host device, single thread (${REPORTS_DIR}/benchmarks.json)"
env -u TORCH_INFINI_HOST_ASYNC -u TORCH_INFINI_HOST_DEVICES \
  "$PYTHON" benchmarks/run.py --json "${REPORTS_DIR}/benchmarks.json"

step "charts (${REPORTS_DIR}/*.svg)"
"$PYTHON" tools/charts.py --benchmarks "${REPORTS_DIR}/benchmarks.json" \
  --op-coverage "${REPORTS_DIR}/op_coverage.json" --op-db "${REPORTS_DIR}/op_db.json" \
  --out "${REPORTS_DIR}"

step "sanitizers: ASan + UBSan build, ctest"
BUILD_DIR="${SANITIZE_BUILD_DIR:-build/asan}" bash ci/sanitize.sh --ctest
step "done"
