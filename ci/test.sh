#!/usr/bin/env bash
# README command 2: check that includes only point down (tools/check_layers.py),
# build the project once from scratch (the wheel, whose
# build tree has the C++ tests), install it, run ctest in that tree, run the
# reports (build/reports/), then the Python and conformance suites on the
# host device inline, the runtime and model tests again with async streams
# and two devices (the soak runs there), ctest and the whole suite again on
# a device whose memory the host cannot touch (discrete mode, async streams,
# two devices: the paths of an accelerator), the benchmarks in shared and
# discrete memory (build/reports/benchmarks*.json, side by side in
# benchmarks_side_by_side.md), and finally ctest and the untrusted-input
# tests with the fuzzer on an ASan + UBSan build (ci/sanitize.sh --ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
BUILD_DIR="${BUILD_DIR:-build/ci}"
JOBS="${JOBS:-2}"

# A step's heading, with the time since the start (CI's time limits).
step() { echo "== [$((SECONDS / 60))m$((SECONDS % 60))s] $*"; }

bash ci/install_deps.sh

# Includes only point down (docs/layout.md, "Layers"): seconds, before the build.
step "layers: no include runs up a layer (tools/check_layers.py)"
"$PYTHON" tools/check_layers.py

# One compiler for both builds below (scikit-build-core would pick g++ where
# CMake picks c++), given to the builds only: Inductor's kernel compiles in
# the tests read CXX too, and take a compiler named c++ for one that is not
# GCC: they then write their precompiled kernel header where GCC never looks
# (.pch), and every kernel compile parses ATen's headers again (twice the
# time of a cold run's compile tests). ccache keys on paths relative to the
# checkout, so a rebuild in another clone of the same sources hits the cache.
BUILD_COMPILERS=(CC="${CC:-cc}" CXX="${CXX:-c++}")
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(pwd)}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"

step "build once: the wheel, installed; its build tree has the C++ tests (${BUILD_DIR})"
rm -rf "${BUILD_DIR}"
# -v: the compile's progress in the log (the longest step of a cold run).
env "${BUILD_COMPILERS[@]}" CMAKE_BUILD_PARALLEL_LEVEL="${JOBS}" \
  "$PYTHON" -m pip install --disable-pip-version-check \
  --no-build-isolation --no-deps -v -C build-dir="${BUILD_DIR}" \
  -C cmake.define.TORCH_INFINI_BUILD_TESTS=ON .
# The sanitizers' build (the longest compile of the run) runs from here to
# the benchmarks' end at the lowest priority (nice 19): the steps below get
# the cores whenever they want them, and the build takes what they leave
# idle (ctest, the reports, the ends of the pytest passes, where one worker
# waits for the other; the single-threaded benchmarks' second core). Its
# log is printed when it is waited for, after the benchmarks.
REPORTS_DIR="${REPORTS_DIR:-build/reports}"
mkdir -p "${REPORTS_DIR}"
SANITIZE_BUILD_DIR="${SANITIZE_BUILD_DIR:-build/asan}"
SANITIZE_BUILD_LOG="${REPORTS_DIR}/sanitize_build.log"
step "sanitizers: ASan + UBSan build started at the lowest priority (${SANITIZE_BUILD_LOG})"
# Its own session (setsid): one process group, which a failing step stops
# whole. Where the kernel groups a session's processes for scheduling
# (autogroup, sched(7)), nice ranks processes within a group only, and a
# session of its own would get as much CPU as all the steps together: the
# group's own nice value is set to 19 too.
env "${BUILD_COMPILERS[@]}" BUILD_DIR="${SANITIZE_BUILD_DIR}" setsid bash -c \
  'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 bash ci/sanitize.sh --build' \
  >"${SANITIZE_BUILD_LOG}" 2>&1 &
SANITIZE_BUILD_PID=$!
trap 'kill -- -"${SANITIZE_BUILD_PID}" 2>/dev/null || true' EXIT

step "C++: ctest (${BUILD_DIR})"
ctest --test-dir "${BUILD_DIR}" --output-on-failure

# Gaps never fail the reports; failing to generate them does (set -e).
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

# --durations: the slowest tests of each whole-suite pass in the log (where
# CI's time goes; a cold run's compiles show up there).
step "pytest: host device, inline streams, 1 device"
env -u TORCH_INFINI_HOST_ASYNC -u TORCH_INFINI_HOST_DEVICES \
  "$PYTHON" -m pytest -q -n "${JOBS}" --durations=15 tests/python tests/conformance

# Async streams and two devices: the files whose behaviour depends on the
# stream mode or the device count (runtime, memory, copies, fallback,
# distributed, threads, the soak) and those that run whole
# models through every kind of work (autograd, modules, the Llama example).
# The operators' own files ran inline above: their kernels are enqueued
# through the one path these files drive. From every other file, the tests
# marked for two devices or async streams. torch.compile's files
# (test_compile, test_compiled_fused_calls, test_compiler_plugin) run whole
# with async streams and two devices in the discrete pass below (the
# generated kernels launch on the stream the same way there, against the
# kernel view); here only their marked tests.
ASYNC_TESTS=(tests/python/runtime/test_device.py tests/python/runtime/test_memory.py
  tests/python/runtime/test_record_stream.py tests/python/runtime/test_pinned_memory.py
  tests/python/runtime/test_memory_history.py tests/python/runtime/test_streams_events.py
  tests/python/runtime/test_host_stream_queue.py tests/python/ops/aten/test_copy.py tests/python/ops/aten/test_tensors.py
  tests/python/ops/aten/test_set_storage.py tests/python/models/test_tied_parameters.py
  tests/python/ops/fallback/test_cpu_fallback.py tests/python/ops/fallback/test_cpu_fallback_staged.py
  tests/python/ops/fallback/test_fallback_devices.py tests/python/runtime/test_threads.py tests/python/models/test_soak.py
  tests/python/runtime/test_fork.py tests/python/runtime/test_random.py tests/python/runtime/test_profiler.py
  tests/python/distributed/test_distributed.py tests/python/models/test_autograd.py tests/python/models/test_modules.py tests/python/models/test_llama.py
  tests/python/models/test_main_job.py)
step "pytest: host device, async streams, 2 devices (${#ASYNC_TESTS[@]} files, then the marked tests of the others)"
TORCH_INFINI_HOST_ASYNC=1 TORCH_INFINI_HOST_DEVICES=2 \
  "$PYTHON" -m pytest -q -n "${JOBS}" "${ASYNC_TESTS[@]}"
TORCH_INFINI_HOST_ASYNC=1 TORCH_INFINI_HOST_DEVICES=2 \
  "$PYTHON" -m pytest -q -n "${JOBS}" -m "requires_two_devices or requires_async_host" \
  "${ASYNC_TESTS[@]/#/--ignore=}" tests/python tests/conformance

# The whole suite again where device memory is out of the host's reach
# (TORCH_INFINI_HOST_MEMORY=discrete: a host access to it faults), with async
# streams and two devices: every path an accelerator takes (the fallback
# staged through pinned memory, torch.compile's kernels launched on the
# kernel view, the graph passes' rewrites, autograd's device threads). A
# test that cannot hold there skips with a reason true of accelerators; -rs
# lists each with its count. The C++ tests first.
step "discrete memory: ctest (${BUILD_DIR})"
TORCH_INFINI_HOST_MEMORY=discrete ctest --test-dir "${BUILD_DIR}" --output-on-failure \
  -E '^cpp_example_installed$'
step "pytest: discrete memory, async streams, 2 devices, the whole suite"
TORCH_INFINI_HOST_MEMORY=discrete TORCH_INFINI_HOST_ASYNC=1 TORCH_INFINI_HOST_DEVICES=2 \
  "$PYTHON" -m pytest -q -rs -n "${JOBS}" --durations=15 tests/python tests/conformance

# The untrusted-input fuzzer again with many more cases (the tests marked
# fuzz; ~30 s).
step "fuzzer: 40,000 cases"
env -u TORCH_INFINI_HOST_ASYNC -u TORCH_INFINI_HOST_DEVICES TORCH_INFINI_FUZZ_CASES=40000 \
  "$PYTHON" -m pytest -q -n "${JOBS}" -m fuzz tests/python/security/test_untrusted_fuzz.py

# Ratios are reported, never asserted (a shared CI machine is noisy); a
# result that differs from the CPU fails the run. Three rounds here (CI's
# time); `python benchmarks/run.py` runs seven, for the numbers reported.
step "benchmarks: host device, single thread, 3 rounds (${REPORTS_DIR}/benchmarks.json)"
env -u TORCH_INFINI_HOST_ASYNC -u TORCH_INFINI_HOST_DEVICES \
  "$PYTHON" benchmarks/run.py --rounds 3 --json "${REPORTS_DIR}/benchmarks.json"
# In discrete memory: the whole models (eager and compiled), the fallback's
# cost, with what crosses the host boundary per training and decode step.
step "benchmarks: discrete memory, the models and the fallback (${REPORTS_DIR}/benchmarks_discrete.json)"
env -u TORCH_INFINI_HOST_ASYNC -u TORCH_INFINI_HOST_DEVICES TORCH_INFINI_HOST_MEMORY=discrete \
  "$PYTHON" benchmarks/run.py --rounds 3 --only Llama --only fallback: \
  --json "${REPORTS_DIR}/benchmarks_discrete.json"
"$PYTHON" benchmarks/side_by_side.py "${REPORTS_DIR}/benchmarks.json" \
  "${REPORTS_DIR}/benchmarks_discrete.json" --markdown "${REPORTS_DIR}/benchmarks_side_by_side.md"

step "charts (${REPORTS_DIR}/*.svg)"
"$PYTHON" tools/charts.py --benchmarks "${REPORTS_DIR}/benchmarks.json" \
  --benchmarks "${REPORTS_DIR}/benchmarks_discrete.json" \
  --op-coverage "${REPORTS_DIR}/op_coverage.json" --op-db "${REPORTS_DIR}/op_db.json" \
  --out "${REPORTS_DIR}"

step "sanitizers: the build's end, then ctest, the untrusted-input tests and fuzzer"
build_status=0
wait "${SANITIZE_BUILD_PID}" || build_status=$?
trap - EXIT
cat "${SANITIZE_BUILD_LOG}"
if [ "${build_status}" -ne 0 ]; then
  echo "the ASan + UBSan build failed (exit ${build_status}): its log is above" >&2
  exit "${build_status}"
fi
BUILD_DIR="${SANITIZE_BUILD_DIR}" bash ci/sanitize.sh --ctest
step "done"
