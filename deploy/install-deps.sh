#!/usr/bin/env bash
# Installs everything gpukit needs to build and test on Debian 12 (and Ubuntu 24.04):
# Debian packages with apt-get, Python tooling with pip. Safe to run again: it installs
# only what is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3-dev
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "==> Debian packages already installed"
fi

# Python tooling (for client/python once it exists, and for scripts).
PY_REQUIREMENTS="$(dirname "$0")/requirements-dev.txt"
if [ -s "$PY_REQUIREMENTS" ]; then
  echo "==> installing Python tooling from $PY_REQUIREMENTS"
  python3 -m pip install --quiet --disable-pip-version-check -r "$PY_REQUIREMENTS"
fi

# The CUDA toolkit headers (cuda.h) are needed at build time only; no CUDA library is linked.
CUDA_INCLUDE="${GPUKIT_CUDA_INCLUDE_DIR:-/usr/local/cuda/include}"
if [ ! -f "$CUDA_INCLUDE/cuda.h" ]; then
  echo "error: $CUDA_INCLUDE/cuda.h not found. Install the CUDA toolkit (its headers are" >&2
  echo "       enough) or set GPUKIT_CUDA_INCLUDE_DIR to the folder holding cuda.h." >&2
  exit 1
fi
echo "==> dependencies ready"
