#!/usr/bin/env bash
# Sanitizer runs (issue: reliability harness).
#
#   bash ci/sanitize.sh            ASan + UBSan: build, ctest (C++ tests and the
#                                  installed LibTorch example), then the Python
#                                  tests of the runtime, allocator, streams and
#                                  events, copies, CPU fallback, profiler and
#                                  the soak (inline and async), and of the
#                                  operators (inline)
#   bash ci/sanitize.sh --ctest    the build, the C++ tests (shared and discrete
#                                  memory), the untrusted-input tests with the
#                                  fuzzer, and the untrusted-input and discrete
#                                  memory tests in discrete memory (what CI runs)
#   bash ci/sanitize.sh --build    the ASan + UBSan build alone (CI starts it
#                                  beside the single-threaded benchmarks; its
#                                  --ctest then finds it built)
#   bash ci/sanitize.sh --thread   TSan: build, then the C++ runtime and
#                                  allocator tests and the Python soak and
#                                  stream tests, with async host streams
#
# PyTorch and Python are not instrumented: the sanitizer runtime is preloaded
# into Python, and tools/sanitizers/ suppresses only reports on code that is
# not ours (PyTorch's, glibc's; each entry says why). Every report fails the
# run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-2}"
MODE="${1:-all}"
SUPP="$(pwd)/tools/sanitizers"

# The interpreter itself, not a wrapper script (pyenv's shims are bash, which
# a preloaded sanitizer runtime would then check too).
PYTHON_BIN="$("$PYTHON" -c 'import sys; print(sys.executable)')"

# BUILD_DIR/python: the package sources plus the instrumented module (which
# finds libtorch_infini.so in the build tree by its RPATH).
stage_python() {  # BUILD_DIR
  rm -rf "$1/python" && mkdir -p "$1/python"
  cp -r python/torch_infini python/torch_infini_autoload.py "$1/python/"
  cp "$1"/native/bindings/_C*.so "$1/_build_info.py" "$1/python/torch_infini/"
}

configure_and_build() {  # BUILD_DIR SANITIZERS [CMAKE_ARGS...]
  local build="$1" sanitizers="$2"
  shift 2
  cmake -S . -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTORCH_INFINI_SANITIZE="${sanitizers}" \
    -DPython_EXECUTABLE="$(command -v "$PYTHON")" "$@"
  cmake --build "${build}" -j "${JOBS}"
}

if [ "$MODE" = "--thread" ]; then
  BUILD_DIR="${BUILD_DIR:-build/tsan}"
  echo "== TSan: configure, build (${BUILD_DIR})"
  configure_and_build "${BUILD_DIR}" thread -DTORCH_INFINI_BUILD_PYTHON=ON
  # A report makes the process exit with 66 at its end (tests pass or not).
  export TSAN_OPTIONS="second_deadlock_stack=1 suppressions=${SUPP}/tsan.supp"
  export TORCH_INFINI_HOST_ASYNC=1 TORCH_INFINI_HOST_DEVICES=2
  echo "== TSan: C++ host runtime, caching allocator (8 threads), op allocations, CPU allocation redirect; async streams"
  for test in test_host_runtime test_caching_allocator test_op_allocations test_cpu_allocation_redirect; do
    "${BUILD_DIR}/tests/cpp/${test}"
  done
  # Python: the soak and the stream, event, memory and copy tests, with TSan
  # preloaded. One intra-op thread: PyTorch's OpenMP (libgomp) synchronizes
  # its workers in ways TSan cannot see unless libgomp is rebuilt with it.
  stage_python "${BUILD_DIR}"
  echo "== TSan: Python soak, streams, events, memory, copies; async streams"
  OMP_NUM_THREADS=1 TORCH_INFINI_SOAK_SECONDS="${TORCH_INFINI_SOAK_SECONDS:-20}" \
    LD_PRELOAD="$(gcc -print-file-name=libtsan.so)" PYTHONPATH="$(pwd)/${BUILD_DIR}/python" \
    "${PYTHON_BIN}" -m pytest -q -n "${JOBS}" -p no:cacheprovider tests/python/models/test_soak.py \
    tests/python/runtime/test_streams_events.py tests/python/runtime/test_memory.py tests/python/runtime/test_record_stream.py \
    tests/python/runtime/test_pinned_memory.py tests/python/ops/aten/test_copy.py \
    tests/python/runtime/test_threads.py
  exit 0
fi

BUILD_DIR="${BUILD_DIR:-build/asan}"
echo "== ASan + UBSan: configure, build (${BUILD_DIR})"
configure_and_build "${BUILD_DIR}" address,undefined -DTORCH_INFINI_BUILD_PYTHON=ON
[ "$MODE" = "--build" ] && exit 0
# allocator_may_return_null: an allocation no machine has returns NULL, as
# malloc does, so the tests of out-of-memory errors see them (ASan would
# abort the process instead).
export ASAN_OPTIONS="detect_leaks=1 halt_on_error=1 strict_init_order=1 check_initialization_order=1 allocator_may_return_null=1"
export LSAN_OPTIONS="suppressions=${SUPP}/lsan.supp print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 suppressions=${SUPP}/ubsan.supp"
echo "== ASan + UBSan: ctest (LeakSanitizer on)"
if [ "$MODE" = "--ctest" ]; then
  # CI: the installed LibTorch example is built and run against the main
  # build's package (ci/test.sh); here the C++ tests run instrumented. The
  # compiler plug-in example runs in Python (an instrumented plug-in in an
  # uninstrumented interpreter): ci/test.sh's ctest runs it.
  ctest --test-dir "${BUILD_DIR}" --output-on-failure \
    -E '^(cpp_example_installed|compiler_plugin_example)$'
  # Again where device memory is out of the host's reach (discrete mode):
  # the runtime, the allocator and the plug-in's launches on the kernel view.
  echo "== ASan + UBSan: ctest, discrete memory"
  TORCH_INFINI_HOST_MEMORY=discrete ctest --test-dir "${BUILD_DIR}" --output-on-failure \
    -E '^(cpp_example_installed|compiler_plugin_example)$'
else
  ctest --test-dir "${BUILD_DIR}" --output-on-failure -E '^compiler_plugin_example$'
fi

stage_python "${BUILD_DIR}"
# Python is not linked with the ASan runtime: it is preloaded, with libstdc++
# (else ASan cannot find the real __cxa_throw and aborts on the first C++
# exception). LeakSanitizer is off here: CPython frees little at exit by
# design and PyTorch's pybind11 registrations are never freed, and a leak
# suppression matches any frame of a stack (every call from Python passes
# through libpython and libtorch_python), so suppressing them would hide
# leaks of ours too. Leaks are checked by ctest above (LSan on) and by
# tests/python/models/test_leaks.py (allocator and RSS over 200 training steps).
PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)"
run_instrumented() {  # pytest arguments
  ASAN_OPTIONS="${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}" LD_PRELOAD="${PRELOAD}" \
    PYTHONPATH="$(pwd)/${BUILD_DIR}/python" "${PYTHON_BIN}" -m pytest -q -n "${JOBS}" \
    -p no:cacheprovider "$@"
}
# Untrusted inputs (crafted checkpoints, storage geometries): the tests and
# the fuzzer, its 3,000 cases (TORCH_INFINI_FUZZ_CASES sets more: 20,000 take
# about 5 minutes here). An access outside a storage that the CPU comparison
# cannot see, ASan reports.
echo "== ASan + UBSan: untrusted inputs and the fuzzer"
run_instrumented tests/python/security/test_untrusted_inputs.py tests/python/security/test_untrusted_fuzz.py
echo "== ASan + UBSan: untrusted inputs and discrete memory's own tests, discrete memory"
TORCH_INFINI_HOST_MEMORY=discrete run_instrumented tests/python/security/test_untrusted_inputs.py \
  tests/python/runtime/test_discrete_memory.py
[ "$MODE" = "--ctest" ] && exit 0
RUNTIME_TESTS=(tests/python/runtime/test_device.py tests/python/runtime/test_memory.py
  tests/python/runtime/test_record_stream.py tests/python/runtime/test_pinned_memory.py
  tests/python/runtime/test_memory_history.py tests/python/runtime/test_streams_events.py tests/python/ops/aten/test_copy.py
  tests/python/ops/aten/test_tensors.py tests/python/ops/fallback/test_cpu_fallback.py
  tests/python/ops/fallback/test_cpu_fallback_staged.py tests/python/runtime/test_threads.py
  tests/python/runtime/test_profiler.py tests/python/models/test_soak.py)
# The operators' tests run inline only: there the allocator poisons memory no
# tensor owns, so a kernel overrunning its tensor is reported.
KERNEL_TESTS=(tests/python/test_ops_*.py tests/python/ops/random/test_random_ops.py tests/python/runtime/test_random.py
  tests/python/test_fused_*.py tests/python/ops/fused/test_paged_attention.py tests/python/models/test_autograd.py
  tests/python/ops/aten/test_type_promotion.py tests/python/ops/aten/test_rnn.py tests/python/models/test_modules.py
  tests/python/ops/amp/test_autocast.py tests/python/ops/amp/test_grad_scaler.py tests/python/models/test_llama.py
  tests/python/package/test_errors.py tests/python/ops/fallback/test_fallback_errors.py)
for pass in inline async; do
  echo "== ASan + UBSan: Python tests, ${pass} host streams"
  tests=("${RUNTIME_TESTS[@]}")
  if [ "$pass" = inline ]; then
    tests+=("${KERNEL_TESTS[@]}")
  else
    export TORCH_INFINI_HOST_ASYNC=1 TORCH_INFINI_HOST_DEVICES=2
  fi
  run_instrumented "${tests[@]}"
done
