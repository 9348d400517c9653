#!/usr/bin/env bash
# Builds the Debian package DIST_DIR/gpukit_<version>_<arch>.deb with CPack's DEB generator
# (the install rules and package settings are cmake/GpukitPackaging.cmake): gpukitd,
# gpukitctl and gpukit-device-plugin in /usr/bin, the executor and compile worker in
# /usr/libexec/gpukit, libgpukit with its headers and gpukit.pc, the systemd unit, the
# sysusers.d entry of the service user, /etc/gpukit/gpukitd.json as a conffile, and Depends
# computed by dpkg-shlibdeps. Prints the .deb's path on its last line.
#
# Usage:
#   deploy/deb.sh                   # configure + build build-deb/ (no tests), then package it
#   BUILD_DIR=build deploy/deb.sh   # package an existing build (its install prefix is set to
#                                   # /usr first; the packaged targets are brought up to date)
#
# Environment:
#   BUILD_DIR  an existing build tree to package (default: build $ROOT/build-deb)
#   DIST_DIR   where the .deb goes (default: $ROOT/dist)
#   JOBS       build parallelism (default: nproc)
#   ALLOW_FAULT_INJECTION  1 packages a test build (GPUKIT_FAULT_INJECTION=ON), as
#              tests/deploy/deb_test.sh does with the CI's build; such a package is for tests
#              only (default: refused)
#
# Needs cmake (cpack) and dpkg-dev (dpkg-shlibdeps); not root or fakeroot (CPack writes the
# archive's owners as root itself).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIST_DIR="${DIST_DIR:-$ROOT/dist}"
JOBS="${JOBS:-$(nproc)}"
PACKAGED_TARGETS=(gpukitd gpukitctl gpukit-device-plugin gpukit-executor gpukit-compile-worker
                  gpukit)

log() { echo "==> $*" >&2; }
die() { echo "deb.sh: $*" >&2; exit 1; }

for tool in cpack dpkg-shlibdeps dpkg-deb; do
  command -v "$tool" >/dev/null || die "$tool not found (apt-get install cmake dpkg-dev)"
done

if [ -n "${BUILD_DIR:-}" ]; then
  BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"
  [ -f "$BUILD_DIR/CMakeCache.txt" ] || die "$BUILD_DIR is not a CMake build tree"
  if ! grep -qx 'CMAKE_INSTALL_PREFIX:PATH=/usr' "$BUILD_DIR/CMakeCache.txt"; then
    log "setting $BUILD_DIR's install prefix to /usr (the package's)"
    cmake -B "$BUILD_DIR" -DCMAKE_INSTALL_PREFIX=/usr >/dev/null
  fi
else
  BUILD_DIR="$ROOT/build-deb"
  . "$ROOT/deploy/cuda-env.sh"  # the CUDA headers and nvcc (deploy/install-deps.sh)
  log "configuring $BUILD_DIR (prefix /usr, no tests)"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" -DCMAKE_INSTALL_PREFIX=/usr \
    -DGPUKIT_BUILD_TESTS=OFF -DGPUKIT_BUILD_BENCHMARKS=OFF -DGPUKIT_BUILD_PYTHON=OFF \
    -DGPUKIT_FAULT_INJECTION=OFF "${GPUKIT_CUDA_CMAKE_ARGS[@]}" >/dev/null
fi
# A test build's fault-injection ops can crash an executor on a client's request.
if grep -q '^GPUKIT_FAULT_INJECTION:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" &&
   [ "${ALLOW_FAULT_INJECTION:-0}" != "1" ]; then
  die "$BUILD_DIR is a test build (GPUKIT_FAULT_INJECTION=ON); package a release build," \
      "or set ALLOW_FAULT_INJECTION=1 for a package that only tests run"
fi
log "building ${PACKAGED_TARGETS[*]} (-j $JOBS)"
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${PACKAGED_TARGETS[@]}" >&2

log "packaging (cpack -G DEB)"
rm -rf "$BUILD_DIR/deb"
(cd "$BUILD_DIR" && cpack -G DEB -B "$BUILD_DIR/deb" >&2)
debs=("$BUILD_DIR"/deb/gpukit_*.deb)
if [ ${#debs[@]} -ne 1 ] || [ ! -f "${debs[0]}" ]; then
  die "cpack made no single gpukit_*.deb in $BUILD_DIR/deb"
fi
mkdir -p "$DIST_DIR"
deb="$DIST_DIR/$(basename "${debs[0]}")"
mv -f "${debs[0]}" "$deb"
log "$deb ($(du -h "$deb" | cut -f1)); Depends: $(dpkg-deb -f "$deb" Depends)"
echo "$deb"
