#!/usr/bin/env bash
# Configures and builds gpukit into BUILD_DIR (default: build/). Extra arguments go to
# cmake's configure step, e.g. deploy/build.sh -DGPUKIT_SANITIZE=ON. The CUDA headers and
# nvcc are the toolkit's or, without one, those deploy/install-deps.sh fetched (see
# deploy/cuda-env.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$ROOT/deploy/cuda-env.sh"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
JOBS="${JOBS:-$(nproc)}"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  "${GPUKIT_CUDA_CMAKE_ARGS[@]}" \
  "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
