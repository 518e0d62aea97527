#!/usr/bin/env bash
# The GPU run: torch-infini on a real NVIDIA GPU, through InfiniRT and
# InfiniOps built for NVIDIA. Run by hand on a machine with a GPU, CUDA's
# compiler and PyTorch with CUDA (it never fetches anything; CI never runs
# it). Every dependency is a path given here, checked before anything builds:
#
#   tools/gpu_run.sh --infinirt SRC --infiniops SRC --cutlass DIR \
#       [--cuda-libs DIR] [--wheels DIR] [--work DIR] [--out DIR] [--jobs N] [--arch SM] [--build-only]
#
#   --infinirt, --infiniops  InfiniRT and InfiniOps source trees (the versions
#                            docs/stack_versions.md lists)
#   --cutlass                CUTLASS headers: DIR/include/cutlass/cutlass.h
#                            (InfiniOps' NVIDIA kernels include them)
#   --cuda-libs              a folder searched first for libcuda.so (a link-time
#                            stub will do), libcublas and libcublasLt; then the
#                            toolkit, its stubs, the nvidia-* Python packages
#                            and the driver's folders
#   --wheels                 Python wheels the machine lacks, installed with
#                            --no-index into WORK/site
#   --arch                   the CUDA architecture (default: the GPU's, from
#                            nvidia-smi; 90 without one)
#   --build-only             build everything, run nothing (a machine with
#                            no GPU checks the build this way)
#
# Steps: InfiniRT and InfiniOps (NVIDIA) into WORK/prefix; torch-infini
# against them and the machine's torch (WORK/build-torch-infini, staged as a
# package in WORK/python); a smoke test; an error raised on host and on
# nvidia (and under cuda-gdb, for a backtrace where it crashes);
# benchmarks/vs_cuda.py (infini against torch.cuda on the same GPU); the
# operator, copy, stream/event, memory, fallback, fused-operator and compiler
# tests with TORCH_INFINI_BACKEND=nvidia (TEST_TIMEOUT). OUT gets
# summary.md, the logs (build, diagnostics, tests, benchmarks), the tests'
# junit XML and the benchmark table; docs/gpu_runs/<date>-<gpu>.md gets the
# record to commit (tools/gpu_run_report.py: the commits, test counts per
# file, failures, the benchmark table), copied into OUT too.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"

INFINIRT="" INFINIOPS="" CUTLASS="" CUDA_LIBS="" WHEELS="" WORK="/tmp/torch_infini_gpu_run"
OUT="${OUT:-$REPO/build/gpu_run}" JOBS="$(nproc)" ARCH="" BUILD_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --infinirt) INFINIRT="$2"; shift 2 ;;
    --infiniops) INFINIOPS="$2"; shift 2 ;;
    --cutlass) CUTLASS="$2"; shift 2 ;;
    --cuda-libs) CUDA_LIBS="$2"; shift 2 ;;
    --wheels) WHEELS="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --arch) ARCH="$2"; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    *) echo "gpu_run: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT" "$WORK"
SUMMARY="$OUT/summary.md"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
step_start=$SECONDS
step() { note "- [$((SECONDS - step_start))s] $*"; }

# ---------------------------------------------------------------- checks
missing=()
[ -f "$INFINIRT/CMakeLists.txt" ] || missing+=("--infinirt: no InfiniRT source tree at '$INFINIRT'")
[ -f "$INFINIOPS/CMakeLists.txt" ] || missing+=("--infiniops: no InfiniOps source tree at '$INFINIOPS'")
[ -f "$CUTLASS/include/cutlass/cutlass.h" ] || missing+=("--cutlass: no include/cutlass/cutlass.h under '$CUTLASS'")
[ -z "$WHEELS" ] || [ -d "$WHEELS" ] || missing+=("--wheels: no folder '$WHEELS'")
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || missing+=("nvcc (CUDA's compiler) not found")
for tool in cmake ninja; do command -v "$tool" >/dev/null || missing+=("$tool not found"); done
if [ -n "$WHEELS" ] && [ -d "$WHEELS" ]; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$WORK/site" "$WHEELS"/*.whl || missing+=("the wheels in $WHEELS did not install")
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
for module in torch nanobind pytest xdist; do
  "$PYTHON" -c "import $module" 2>/dev/null || missing+=("Python module $module not importable by $PYTHON")
done
if [ "$BUILD_ONLY" = 0 ]; then
  "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null \
    || missing+=("torch.cuda sees no GPU (run with --build-only to check the build alone)")
fi
if [ ${#missing[@]} -gt 0 ]; then
  note "gpu_run: cannot start:"; for m in "${missing[@]}"; do note "  - $m"; done
  exit 2
fi
export PATH="$PATH:/usr/local/cuda/bin"
# The toolkit: CUDA_HOME, else /usr/local/cuda, else where nvcc really lies.
CUDA_ROOT="${CUDA_HOME:-}"
[ -n "$CUDA_ROOT" ] || { [ -x /usr/local/cuda/bin/nvcc ] && CUDA_ROOT=/usr/local/cuda; }
[ -n "$CUDA_ROOT" ] || CUDA_ROOT="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
# The CUDA libraries InfiniOps links (the runtime comes with the toolkit).
lib_dirs=("$CUDA_ROOT/lib64" "$CUDA_ROOT/lib64/stubs" "$CUDA_ROOT/targets/x86_64-linux/lib"
  "$CUDA_ROOT/targets/x86_64-linux/lib/stubs" /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu)
[ -n "$CUDA_LIBS" ] && lib_dirs=("$CUDA_LIBS" "${lib_dirs[@]}")
while read -r d; do lib_dirs+=("$d"); done < <("$PYTHON" -c "
import glob, os
try:
    import nvidia
    for p in nvidia.__path__:
        print(*sorted(glob.glob(os.path.join(p, '*', 'lib'))), sep=chr(10))
except ImportError:
    pass" 2>/dev/null)
find_cuda_lib() {  # name: the first libNAME.so, else libNAME.so.<version>, in lib_dirs
  local d f
  for d in "${lib_dirs[@]}"; do [ -e "$d/lib$1.so" ] && { echo "$d/lib$1.so"; return; }; done
  for d in "${lib_dirs[@]}"; do
    f="$(ls "$d"/lib"$1".so.[0-9]* 2>/dev/null | head -1)"; [ -n "$f" ] && { echo "$f"; return; }
  done
}
CUBLAS="$(find_cuda_lib cublas)" CUBLASLT="$(find_cuda_lib cublasLt)" CUDA_DRIVER="$(find_cuda_lib cuda)"
# The files themselves: the links below must never point at themselves (a
# --cuda-libs of WORK/cuda-libs, the folder they are made in).
CUBLAS="${CUBLAS:+$(readlink -f "$CUBLAS")}" CUBLASLT="${CUBLASLT:+$(readlink -f "$CUBLASLT")}"
CUDA_DRIVER="${CUDA_DRIVER:+$(readlink -f "$CUDA_DRIVER")}"
for pair in "cuBLAS:$CUBLAS" "cuBLASLt:$CUBLASLT" "the CUDA driver library (libcuda.so):$CUDA_DRIVER"; do
  [ -n "${pair#*:}" ] || { echo "gpu_run: ${pair%%:*} not found in ${lib_dirs[*]} (--cuda-libs)" >&2; exit 2; }
done
# Unversioned names for them, searched by every find_library: a CUDA build
# of PyTorch finds CUDA through the old FindCUDA module (CUDA_TOOLKIT_ROOT_DIR)
# when torch-infini finds PyTorch, and that module clears the
# CUDA_<name>_LIBRARY hints on its first run.
mkdir -p "$WORK/cuda-libs"
ln -sf "$CUBLAS" "$WORK/cuda-libs/libcublas.so"
ln -sf "$CUBLASLT" "$WORK/cuda-libs/libcublasLt.so"
ln -sf "$CUDA_DRIVER" "$WORK/cuda-libs/libcuda.so"
CUDA_HINTS=(-DCMAKE_LIBRARY_PATH="$WORK/cuda-libs" -DCUDAToolkit_ROOT="$CUDA_ROOT" -DCUDA_TOOLKIT_ROOT_DIR="$CUDA_ROOT" -DCMAKE_CUDA_COMPILER="$CUDA_ROOT/bin/nvcc" -DCUDA_cublas_LIBRARY="$CUBLAS"
  -DCUDA_cublasLt_LIBRARY="$CUBLASLT" -DCUDA_cuda_driver_LIBRARY="$CUDA_DRIVER")
# cuBLAS's headers: the toolkit's, else those beside the library found.
if [ ! -f "$CUDA_ROOT/include/cublas_v2.h" ]; then
  CUBLAS_INCLUDE="$(cd "$(dirname "$CUBLAS")/../include" 2>/dev/null && pwd)"
  [ -f "$CUBLAS_INCLUDE/cublas_v2.h" ] || { echo "gpu_run: cublas_v2.h found neither in $CUDA_ROOT/include nor beside $CUBLAS" >&2; exit 2; }
  CUDA_HINTS+=(-DCMAKE_CXX_FLAGS="-isystem $CUBLAS_INCLUDE" -DCMAKE_CUDA_FLAGS="-isystem $CUBLAS_INCLUDE")
fi
if [ -z "$ARCH" ]; then
  ARCH="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.[:space:]')"
  ARCH="${ARCH:-90}"
fi
note "# GPU run, $(date -u '+%Y-%m-%d %H:%M UTC')"
note ""
note "- torch $("$PYTHON" -c 'import torch; print(torch.__version__)'), triton $("$PYTHON" -c 'import triton; print(triton.__version__)' 2>/dev/null || echo 'not installed'), nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), sm_$ARCH"
note "- CUDA libraries: $CUBLAS, $CUBLASLT, $CUDA_DRIVER"
note "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo none)"
commit_of() {  # a source tree's commit: its .commit file, or its own git repository's HEAD
  if [ -f "$1/.commit" ]; then cat "$1/.commit"
  elif [ -e "$1/.git" ]; then git -C "$1" rev-parse --short HEAD
  else echo "(unknown commit)"; fi
}
note "- InfiniRT $(commit_of "$INFINIRT"), InfiniOps $(commit_of "$INFINIOPS")"

# ---------------------------------------------------------------- build
PREFIX="$WORK/prefix"
BUILD_LOG="$OUT/build.log"
: > "$BUILD_LOG"
build() {  # name, target, cmake arguments...: configure and build; the log in build.log
  local name="$1" target="$2"; shift 2
  if ! { cmake "$@" && cmake --build "$WORK/build-$name" -j "$JOBS" --target "$target"; } >>"$BUILD_LOG" 2>&1; then
    step "build of $name FAILED (build.log)"; tail -30 "$BUILD_LOG"; exit 1
  fi
}
build infinirt all -S "$INFINIRT" -B "$WORK/build-infinirt" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$PREFIX" -DWITH_NVIDIA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" "${CUDA_HINTS[@]}"
cmake --install "$WORK/build-infinirt" >>"$BUILD_LOG" 2>&1
step "InfiniRT built for NVIDIA"
# The operators torch-infini wires through InfiniOps, read from the seam's
# rows (seam_operators.h; cmake/infiniops_allowlist.cmake); the library
# alone (InfiniOps' examples lag its runtime API at times).
OPS="$(cmake -P "$REPO/cmake/infiniops_allowlist.cmake")"
build infiniops infiniops -S "$INFINIOPS" -B "$WORK/build-infiniops" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$PREFIX" -DINFINI_RT_ROOT="$PREFIX" -DWITH_NVIDIA=ON -DWITH_TORCH=OFF \
  -DAUTO_DETECT_DEVICES=OFF -DGENERATE_OPERATOR_CALL_INSTANTIATIONS=ON -DINFINI_OPS_OPS="$OPS" \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
  -DFETCHCONTENT_SOURCE_DIR_CUTLASS="$CUTLASS" "${CUDA_HINTS[@]}"
cmake --install "$WORK/build-infiniops" >>"$BUILD_LOG" 2>&1
step "InfiniOps built for NVIDIA ($OPS)"

export INFINI_RT_PREFIX="$PREFIX" INFINI_OPS_PREFIX="$PREFIX"
export LD_LIBRARY_PATH="$PREFIX/lib:$PREFIX/lib64:$CUDA_ROOT/lib64:$(dirname "$CUBLAS")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
build torch-infini all -S "$REPO" -B "$WORK/build-torch-infini" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DTORCH_INFINI_STACK=REQUIRE -DTORCH_INFINI_BUILD_TESTS=OFF -DPython_EXECUTABLE="$(command -v "$PYTHON")" \
  "${CUDA_HINTS[@]}"
# The package as a wheel would lay it out: sources, _C, libtorch_infini,
# and beside it the autoload entry point's module.
STAGE="$WORK/python"
rm -rf "$STAGE" && mkdir -p "$STAGE"
cp -r python/torch_infini python/torch_infini_autoload.py "$STAGE/"
cp "$WORK/build-torch-infini"/native/bindings/_C*.so "$WORK/build-torch-infini/libtorch_infini.so" \
  "$WORK/build-torch-infini/_build_info.py" "$STAGE/torch_infini/"
step "torch-infini built against them"
[ "$BUILD_ONLY" = 1 ] && { note "- build only: nothing run"; exit 0; }

# ---------------------------------------------------------------- smoke
export PYTHONPATH="$STAGE${PYTHONPATH:+:$PYTHONPATH}" TORCH_INFINI_BACKEND=nvidia
export TORCH_INFINI_TRITON_ARCH="$ARCH" PYTHONUNBUFFERED=1
status=0
"$PYTHON" -c "import torch, torch_infini; x = torch.ones(4, device='infini'); print('smoke:', torch_infini.backend(), (x + x).cpu().tolist())" \
  >"$OUT/tests.log" 2>&1 || { step "import/smoke FAILED"; cat "$OUT/tests.log"; status=1; }
step "smoke: $(tail -1 "$OUT/tests.log")"

# An error raised by torch-infini's own checks, on each backend (a bad mm:
# a TORCH_CHECK in the bridge), then under cuda-gdb where it crashes.
RAISE="import torch, torch_infini; x = torch.ones(2, 3, device='infini')
try:
    torch.mm(x, x)
except RuntimeError as e:
    print('raised', type(e).__name__, str(e).splitlines()[0])"
for backend in host nvidia; do
  TORCH_INFINI_BACKEND=$backend timeout 60 "$PYTHON" -X faulthandler -c "$RAISE" >>"$OUT/diag.log" 2>&1
  step "an error raised on $backend: exit $? ($(grep -a '^raised' "$OUT/diag.log" | tail -1))"
done
if command -v cuda-gdb >/dev/null; then
  timeout 60 cuda-gdb -batch -ex run -ex bt -ex "info sharedlibrary" --args "$PYTHON" -c "$RAISE" >>"$OUT/diag.log" 2>&1
  step "cuda-gdb: exit $? (diag.log)"
fi

# ---------------------------------------------------------------- benchmarks
timeout "${BENCH_TIMEOUT:-180}" "$PYTHON" benchmarks/vs_cuda.py --json "$OUT/vs_cuda.json" \
  --markdown "$OUT/vs_cuda.md" >"$OUT/bench.log" 2>&1
rc=$?
step "benchmarks vs torch.cuda (rc $rc)"
[ $rc = 0 ] || status=1
cat "$OUT/vs_cuda.md" >>"$SUMMARY" 2>/dev/null

# ---------------------------------------------------------------- tests
TESTS=(
  tests/python/ops/aten/test_ops_elementwise.py tests/python/ops/aten/test_ops_elementwise_scalars.py
  tests/python/ops/aten/test_ops_matmul.py tests/python/ops/aten/test_ops_activation.py
  tests/python/ops/aten/test_ops_norm.py tests/python/ops/aten/test_ops_cat.py tests/python/ops/aten/test_ops_fill.py
  tests/python/ops/aten/test_copy.py tests/python/runtime/test_streams_events.py tests/python/runtime/test_memory.py
  tests/python/runtime/test_record_stream.py tests/python/runtime/test_pinned_memory.py
  tests/python/ops/fallback/test_cpu_fallback.py tests/python/ops/fallback/test_cpu_fallback_staged.py
  tests/python/ops/fused/test_fused_ops.py tests/python/ops/fused/test_fused_rms_norm_rotary.py
  tests/python/ops/aten/test_ops_softmax.py tests/python/ops/aten/test_ops_embedding.py tests/python/ops/aten/test_ops_convolution.py
  tests/python/ops/fused/test_paged_attention.py tests/python/ops/fused/test_fused_routing_sampling.py
  tests/python/ops/seam/test_declared_support.py
  tests/python/compiler/test_compile.py tests/python/compiler/test_compiler_plugin.py tests/python/compiler/test_compiler_plugin_nvidia.py
)
timeout "${TEST_TIMEOUT:-300}" "$PYTHON" -m pytest -q -rfE --tb=short -n "${TEST_JOBS:-8}" -p no:cacheprovider \
  --junitxml="$OUT/junit.xml" -o junit_family=xunit1 "${TESTS[@]}" >>"$OUT/tests.log" 2>&1
rc=$?
step "tests (rc $rc): $(grep -E '[0-9]+ (passed|failed)' "$OUT/tests.log" | tail -1)"
[ $rc = 0 ] || status=1

# ---------------------------------------------------------------- the record
# What ran, dated, under docs/gpu_runs/ (committed with the fixes the run led
# to), and a copy in OUT (the device machine returns OUT).
RECORD="$("$PYTHON" tools/gpu_run_report.py --summary "$SUMMARY" --junit "$OUT/junit.xml" \
  --benchmarks "$OUT/vs_cuda.md" --docs "$REPO/docs/gpu_runs")" && cp "$RECORD" "$OUT/" \
  || { echo "gpu_run: the record under docs/gpu_runs was not written" >&2; status=1; }
echo "gpu_run: record $RECORD"
exit $status
