#!/usr/bin/env bash
# Installs what building and testing torch-infini needs into the current
# Python. PyTorch is pinned explicitly first: an open range with no torch
# installed would pull a multi-GB CUDA build.
set -euo pipefail
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"

"$PYTHON" -m pip install --disable-pip-version-check -q "torch==${TORCH_VERSION}"
"$PYTHON" -m pip install --disable-pip-version-check -q \
  "scikit-build-core>=0.10" "nanobind>=2.0" "cmake>=3.24" ninja \
  pytest pytest-xdist hypothesis numpy
# Test-only: a model written by others (tests/python/models/test_llama.py), built
# from a config; pinned, and installed after torch so it never pulls one.
"$PYTHON" -m pip install --disable-pip-version-check -q "transformers==5.24.0"
# Test-only: the nvidia compiler plug-in's toolchain. Triton compiles ahead
# of time without a GPU (tests/python/compiler/test_compiler_plugin_nvidia.py); it
# has no dependencies of its own to resolve.
"$PYTHON" -m pip install --disable-pip-version-check -q --no-deps "triton==3.9.0"

# ccache is optional; it only makes rebuilds faster.
if ! command -v ccache >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get install -y -qq ccache >/dev/null 2>&1 || true)
fi
