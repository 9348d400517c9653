#!/usr/bin/env bash
# Configures and builds gpukit into BUILD_DIR (default: build/). Extra arguments go to
# cmake's configure step, e.g. deploy/build.sh -DGPUKIT_SANITIZE=ON.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
JOBS="${JOBS:-$(nproc)}"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  ${GPUKIT_CUDA_INCLUDE_DIR:+-DGPUKIT_CUDA_INCLUDE_DIR="$GPUKIT_CUDA_INCLUDE_DIR"} \
  "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
