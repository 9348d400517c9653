# Sourced (not run) by the scripts that configure CMake: deploy/build.sh, tests/run_all.sh,
# deploy/bundle.sh. Needs ROOT (the repository). Says where the CUDA headers and nvcc are, for
# the build only: gpukit links no CUDA library.
#
# - GPUKIT_CUDA_INCLUDE_DIR set: nothing changes (GPUKIT_NVCC too, if set).
# - The toolkit at GPUKIT_CUDA_ROOT (default /usr/local/cuda; set it to use a toolkit elsewhere,
#   or to a path without one to build as a machine without the toolkit would): for the default
#   nothing is set (CMake's defaults are that toolkit); for another root, its include/ and
#   bin/nvcc.
# - No toolkit there: the CUDA 13.0 headers and nvcc that deploy/install-deps.sh fetched from
#   NVIDIA's PyPI wheels into GPUKIT_CUDA_DEPS_DIR (default $ROOT/.deps/cuda). Where that has no
#   working nvcc, GPUKIT_PRECOMPILE_KERNELS defaults to OFF (NVRTC compiles the built-in
#   kernels at run time), so that no stray nvcc is paired with these headers.
#
# Sets (not exported) GPUKIT_CUDA_INCLUDE_DIR, GPUKIT_NVCC and GPUKIT_PRECOMPILE_KERNELS where
# they apply, and GPUKIT_CUDA_CMAKE_ARGS: the -D options that pass them on to CMake.
gpukit_cuda_root="${GPUKIT_CUDA_ROOT:-/usr/local/cuda}"
GPUKIT_CUDA_DEPS_DIR="${GPUKIT_CUDA_DEPS_DIR:-$ROOT/.deps/cuda}"
if [ -z "${GPUKIT_CUDA_INCLUDE_DIR:-}" ]; then
  if [ -f "$gpukit_cuda_root/include/cuda.h" ]; then
    if [ -n "${GPUKIT_CUDA_ROOT:-}" ]; then
      GPUKIT_CUDA_INCLUDE_DIR="$gpukit_cuda_root/include"
      if [ -z "${GPUKIT_NVCC:-}" ] && [ -x "$gpukit_cuda_root/bin/nvcc" ]; then
        GPUKIT_NVCC="$gpukit_cuda_root/bin/nvcc"
      fi
    fi
  elif [ -f "$GPUKIT_CUDA_DEPS_DIR/include/cuda.h" ]; then
    GPUKIT_CUDA_INCLUDE_DIR="$GPUKIT_CUDA_DEPS_DIR/include"
    if [ -z "${GPUKIT_NVCC:-}" ]; then
      if [ -x "$GPUKIT_CUDA_DEPS_DIR/bin/nvcc" ]; then
        GPUKIT_NVCC="$GPUKIT_CUDA_DEPS_DIR/bin/nvcc"
      else
        GPUKIT_PRECOMPILE_KERNELS="${GPUKIT_PRECOMPILE_KERNELS:-OFF}"
      fi
    fi
  fi
fi
GPUKIT_CUDA_CMAKE_ARGS=(
  ${GPUKIT_CUDA_INCLUDE_DIR:+"-DGPUKIT_CUDA_INCLUDE_DIR=$GPUKIT_CUDA_INCLUDE_DIR"}
  ${GPUKIT_NVCC:+"-DGPUKIT_NVCC=$GPUKIT_NVCC"}
  ${GPUKIT_PRECOMPILE_KERNELS:+"-DGPUKIT_PRECOMPILE_KERNELS=$GPUKIT_PRECOMPILE_KERNELS"}
)
unset gpukit_cuda_root
