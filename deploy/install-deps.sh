#!/usr/bin/env bash
# Installs everything gpukit needs to build and test on Debian 12 (and Ubuntu 24.04):
# Debian packages with apt-get, Python tooling with pip. Safe to run again: it installs
# only what is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libjemalloc-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3-dev
  libseccomp-dev
  libcpp-httplib-dev
  libsystemd-dev nlohmann-json3-dev
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

# Python tooling for client/python and its tests (numpy, pytest, pybind11, scikit-build-core,
# PyYAML for the Kubernetes manifests test),
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

# The CUDA headers (cuda.h, cudaTypedefs.h, nvrtc.h, cublasLt.h and what they include) are
# needed at build time only; no CUDA library is linked (libcuda, NVRTC and cuBLASLt are
# dlopen'd at run time). nvcc precompiles the built-in kernels. Both come from the toolkit at
# GPUKIT_CUDA_ROOT (default /usr/local/cuda) or GPUKIT_CUDA_INCLUDE_DIR; without either, from
# NVIDIA's PyPI wheels at the pinned CUDA 13.0 versions below, into GPUKIT_CUDA_DEPS_DIR
# (default .deps/cuda, laid out as the toolkit is: include/, bin/, nvvm/), which
# deploy/cuda-env.sh then points the build at. Only headers and the compiler are kept.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CUDA_ROOT="${GPUKIT_CUDA_ROOT:-/usr/local/cuda}"
CUDA_DEPS="${GPUKIT_CUDA_DEPS_DIR:-$ROOT/.deps/cuda}"
CUDA_WHEELS=(
  nvidia-cuda-runtime==13.0.96  # cuda.h, cudaTypedefs.h, cuda_runtime.h, cuda_fp16.h, ...
  nvidia-cuda-crt==13.0.88      # crt/host_defines.h (driver_types.h and nvcc include it)
  nvidia-cuda-cccl==13.0.85     # cccl/nv/target (cuda_fp16.h includes <nv/target>)
  nvidia-cuda-nvrtc==13.0.88    # nvrtc.h
  nvidia-cublas==13.1.0.3       # cublasLt.h, cublas_api.h (a 420 MB wheel: its libraries)
  nvidia-cuda-nvcc==13.0.88     # nvcc, ptxas, fatbinary
  nvidia-nvvm==13.0.88          # cicc and libdevice, which nvcc runs
)
if [ -n "${GPUKIT_CUDA_INCLUDE_DIR:-}" ]; then
  if [ ! -f "$GPUKIT_CUDA_INCLUDE_DIR/cuda.h" ]; then
    echo "error: GPUKIT_CUDA_INCLUDE_DIR=$GPUKIT_CUDA_INCLUDE_DIR holds no cuda.h. Point it at" >&2
    echo "       the folder holding cuda.h, or unset it to use the CUDA toolkit or, without" >&2
    echo "       one, the headers from NVIDIA's PyPI wheels." >&2
    exit 1
  fi
  echo "==> CUDA headers: $GPUKIT_CUDA_INCLUDE_DIR"
elif [ -f "$CUDA_ROOT/include/cuda.h" ]; then
  echo "==> CUDA headers: the CUDA toolkit at $CUDA_ROOT"
elif [ -f "$CUDA_DEPS/include/cuda.h" ] &&
     [ "$(cat "$CUDA_DEPS/.wheels" 2>/dev/null)" = "${CUDA_WHEELS[*]}" ]; then
  echo "==> CUDA headers and nvcc: $CUDA_DEPS"
  echo "    (NVIDIA's PyPI wheels, CUDA 13.0; no toolkit at $CUDA_ROOT)"
else
  echo "==> no CUDA toolkit at $CUDA_ROOT: fetching the CUDA 13.0 headers and nvcc from NVIDIA's"
  echo "    PyPI wheels into $CUDA_DEPS (about 600 MB to download; headers and compiler kept)"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "==> installing Debian package: python3-pip"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-pip
  fi
  wheel_dir="$(mktemp -d)"
  staging="$CUDA_DEPS.partial"
  trap 'rm -rf "$wheel_dir" "$staging"' EXIT
  for wheel in "${CUDA_WHEELS[@]}"; do
    echo "    pip download $wheel"
    if ! python3 -m pip download --quiet --disable-pip-version-check --no-deps \
           --only-binary=:all: -d "$wheel_dir" "$wheel"; then
      echo "error: pip could not fetch $wheel from PyPI (see pip's message above)." >&2
      echo "       Without the CUDA toolkit, gpukit's build needs these CUDA headers: let pip" >&2
      echo "       reach PyPI, install the toolkit (its headers are enough), or set" >&2
      echo "       GPUKIT_CUDA_INCLUDE_DIR to a folder holding cuda.h, cudaTypedefs.h, nvrtc.h" >&2
      echo "       and cublasLt.h (and what they include)." >&2
      exit 1
    fi
  done
  # A wheel holds nvidia/cu13/{include,bin,nvvm,lib}/...: keep all but lib/ (the libraries).
  echo "    unpacking include/, bin/ and nvvm/ into $CUDA_DEPS"
  rm -rf "$staging"
  python3 - "$staging" "$wheel_dir"/*.whl <<'PY'
import os, sys, zipfile

dest, wheels = sys.argv[1], sys.argv[2:]
prefix = "nvidia/cu13/"
for wheel in wheels:
    with zipfile.ZipFile(wheel) as archive:
        for entry in archive.infolist():
            name = entry.filename
            if not name.startswith(prefix) or name.endswith("/"):
                continue
            relative = name[len(prefix):]
            if not relative.startswith(("include/", "bin/", "nvvm/")):
                continue
            out = os.path.join(dest, relative)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with archive.open(entry) as src, open(out, "wb") as dst:
                dst.write(src.read())
            mode = (entry.external_attr >> 16) & 0o777
            if mode:
                os.chmod(out, mode)
PY
  # cuda_fp16.h (which cublas_api.h includes) includes <nv/target>, from CCCL's include/cccl:
  # nvcc searches there by itself, the host compiler finds it through include/nv.
  ln -s cccl/nv "$staging/include/nv"
  # nvcc.profile looks for the headers in targets/<target>/include, as in a toolkit.
  case "$(uname -m)" in
    aarch64) cuda_target=sbsa-linux ;;
    *) cuda_target="$(uname -m)-linux" ;;
  esac
  mkdir -p "$staging/targets/$cuda_target"
  ln -s ../../include "$staging/targets/$cuda_target/include"
  # nvcc must compile a kernel here, or the build does without it (NVRTC at run time).
  printf '__global__ void gpukit_probe(float* x) { x[threadIdx.x] += 1.0f; }\n' \
    >"$wheel_dir/probe.cu"
  if "$staging/bin/nvcc" -std=c++17 -arch=sm_90 -cubin -o "$wheel_dir/probe.cubin" \
       "$wheel_dir/probe.cu" >"$wheel_dir/nvcc.log" 2>&1; then
    echo "    nvcc works: $CUDA_DEPS/bin/nvcc precompiles the built-in kernels"
  else
    echo "warning: the wheels' nvcc cannot compile here (below); the build precompiles no" >&2
    echo "         kernels, and NVRTC compiles the built-in kernels at run time on a GPU host." >&2
    sed 's/^/    nvcc | /' "$wheel_dir/nvcc.log" >&2
    rm -rf "$staging/bin" "$staging/nvvm"
  fi
  printf '%s' "${CUDA_WHEELS[*]}" >"$staging/.wheels"
  rm -rf "$CUDA_DEPS"
  mkdir -p "$(dirname "$CUDA_DEPS")"
  mv "$staging" "$CUDA_DEPS"
  rm -rf "$wheel_dir"
  trap - EXIT
  echo "==> CUDA headers and nvcc: $CUDA_DEPS"
fi

# A Prometheus server for tests/python/test_metrics.py, which lets one scrape gpukitd and
# queries it: Debian's package prometheus (2.42), unpacked into GPUKIT_PROMETHEUS_DIR
# (default .deps/prometheus), not installed, since installing it would start a prometheus
# service. Optional: without it that test is skipped.
PROM_DIR="${GPUKIT_PROMETHEUS_DIR:-$ROOT/.deps/prometheus}"
if [ -x "$PROM_DIR/usr/bin/prometheus" ]; then
  echo "==> Prometheus server for the tests: $PROM_DIR/usr/bin/prometheus"
else
  echo "==> fetching Debian's prometheus package into $PROM_DIR (unpacked, not installed)"
  prom_tmp="$(mktemp -d)"
  chmod 0755 "$prom_tmp"  # apt-get download writes as the _apt user where it can
  if (cd "$prom_tmp" && apt-get download -qq prometheus) >"$prom_tmp/log" 2>&1 &&
     dpkg -x "$prom_tmp"/prometheus_*.deb "$prom_tmp/root"; then
    rm -rf "$PROM_DIR" && mkdir -p "$(dirname "$PROM_DIR")" && mv "$prom_tmp/root" "$PROM_DIR"
    echo "    $PROM_DIR/usr/bin/prometheus"
  else
    echo "warning: could not fetch Debian's prometheus package (below); the test that scrapes" >&2
    echo "         gpukitd with a Prometheus server will be skipped" >&2
    sed 's/^/    apt | /' "$prom_tmp/log" >&2
  fi
  rm -rf "$prom_tmp"
fi
echo "==> dependencies ready"
