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
  libseccomp-dev
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

# Python tooling for client/python and its tests (numpy, pytest, pybind11, scikit-build-core),
# into the python3 on PATH: the interpreter tests/run_all.sh builds the module for. A system
# Python without pip gets Debian's; PIP_BREAK_SYSTEM_PACKAGES lets pip install beside
# Debian's own packages (PEP 668) on a plain Debian 12, and means nothing to a pyenv Python.
PY_REQUIREMENTS="$(dirname "$0")/requirements-dev.txt"
if [ -s "$PY_REQUIREMENTS" ]; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "==> installing Debian package: python3-pip"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-pip
  fi
  echo "==> installing Python tooling from $PY_REQUIREMENTS"
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --disable-pip-version-check \
    -r "$PY_REQUIREMENTS"
fi

# The CUDA toolkit headers (cuda.h) are needed at build time only; no CUDA library is linked.
CUDA_INCLUDE="${GPUKIT_CUDA_INCLUDE_DIR:-/usr/local/cuda/include}"
if [ ! -f "$CUDA_INCLUDE/cuda.h" ]; then
  echo "error: $CUDA_INCLUDE/cuda.h not found. Install the CUDA toolkit (its headers are" >&2
  echo "       enough) or set GPUKIT_CUDA_INCLUDE_DIR to the folder holding cuda.h." >&2
  exit 1
fi
echo "==> dependencies ready"
