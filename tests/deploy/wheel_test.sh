#!/usr/bin/env bash
# The wheels of deploy/wheel.sh, installed as a user would: for each wheel, a fresh venv of
# its CPython with LD_LIBRARY_PATH empty, `pip install` of the wheel (numpy, pytest and
# grpcio from the package index), then, from that install (not the source tree):
# tests/deploy/wheel_install_check.py (gpukit imports from the venv's site-packages, the
# versions agree, the module's libraries are the wheel's own, gpukit and grpcio in one
# process) against a gpukitd of BUILD_DIR on a temporary socket (CPU backend), and a subset
# of tests/python (PYTEST_FILES) against the gpukitd that its conftest starts. As root, the
# install check runs a second time with the system's gRPC, protobuf, abseil (and the other
# libraries the wheel vendors) hidden in a mount namespace, as on a host without them.
#
# Usage: tests/deploy/wheel_test.sh BUILD_DIR [WHEEL...]
#   BUILD_DIR  a build with daemon/gpukitd and client/cpp/gpukitctl
#   WHEEL      default: dist/gpukit-<project version>-*.whl
# Environment: PYTEST_FILES (the files of tests/python to run), GRPCIO (pip's requirement).
# A wheel whose CPython is not found here is skipped with a message; no wheel at all, or no
# interpreter for any, exits 77 (skipped).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD_DIR="$(cd "${1:?usage: wheel_test.sh BUILD_DIR [WHEEL...]}" && pwd)"
shift
PYTEST_FILES="${PYTEST_FILES:-test_arrays.py test_ops.py test_sessions_errors_kernels.py
                              test_dlpack.py test_pipeline.py}"
PYTEST_FILES="$(tr -s ' \n' '  ' <<<"$PYTEST_FILES" | sed 's/ $//')"
GRPCIO="${GRPCIO:-grpcio==1.85.3}"  # the Python gRPC that must load beside gpukit's own

fail() { echo "FAILED: wheel_test: $*" >&2; exit 1; }
log() { echo "==> wheel_test: $*"; }

VERSION="$(sed -n 's/^project(gpukit VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")"
if [ $# -gt 0 ]; then WHEELS=("$@"); else
  mapfile -t WHEELS < <(ls "$ROOT/dist/gpukit-$VERSION-"*.whl 2>/dev/null || true)
fi
if [ ${#WHEELS[@]} -eq 0 ]; then
  echo "SKIPPED: wheel_test: no dist/gpukit-$VERSION-*.whl (deploy/wheel.sh makes them)"
  exit 77
fi
for program in daemon/gpukitd client/cpp/gpukitctl; do
  [ -x "$BUILD_DIR/$program" ] || fail "$BUILD_DIR/$program not built"
done
pin() { grep -E "^$1==" "$ROOT/deploy/requirements-dev.txt"; }

find_python() {  # cp312 -> the newest pyenv 3.12.x, else python3.12 on PATH
  local minor="${1#cp3}" candidate
  candidate="$( (ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/3.$minor."*/bin/python3 \
                   2>/dev/null || true) | sort -V | tail -n 1)"
  [ -n "$candidate" ] || candidate="$(command -v "python3.$minor" || true)"
  echo "$candidate"
}

WORK="$(mktemp -d)"
daemon_pid=""
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
export LD_LIBRARY_PATH=""
export PIP_DISABLE_PIP_VERSION_CHECK=1

# A gpukitd for the install check (the pytest suite starts its own).
socket="$WORK/gpukitd.sock"
"$BUILD_DIR/daemon/gpukitd" --backend cpu --listen "unix://$socket" >"$WORK/gpukitd.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 600); do  # readiness is its "listening on" line (or its exit), 60 s at most
  grep -q 'listening on' "$WORK/gpukitd.log" && break
  kill -0 "$daemon_pid" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q 'listening on' "$WORK/gpukitd.log"; then
  cat "$WORK/gpukitd.log"
  fail "gpukitd did not start"
fi

tested=0
for wheel in "${WHEELS[@]}"; do
  name="$(basename "$wheel")"
  tag="$(cut -d- -f3 <<<"$name")"
  python="$(find_python "$tag")"
  if [ -z "$python" ]; then
    echo "SKIPPED: wheel_test: $name: no CPython ${tag#cp} here"
    continue
  fi
  venv="$WORK/venv-$tag"
  log "$name: venv of $python, pip install"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet "$wheel" "$(pin numpy)" "$(pin pytest)" "$GRPCIO" ||
    fail "$name: pip install"
  log "$name: install check (site-packages, versions, vendored libraries, grpcio)"
  (cd "$WORK" && "$venv/bin/python" "$ROOT/tests/deploy/wheel_install_check.py" "$VERSION" \
     "unix://$socket") || fail "$name: install check"
  # Again as on a host without gRPC: in a mount namespace of its own, the system's copies of
  # the libraries the wheel vendors are replaced by empty files (root and unshare only).
  if [ "$(id -u)" = "0" ] && command -v unshare >/dev/null; then
    log "$name: install check with the system's gRPC, protobuf and abseil hidden"
    (cd "$WORK" && unshare --mount --propagation private bash -c '
       set -e
       hidden=0
       for library in /usr/lib/'"$(gcc -print-multiarch)"'/lib{grpc,gpr,protobuf,absl_,spdlog,fmt,cares,re2,upb,address_sorting}*.so*; do
         [ -f "$library" ] || continue
         mount --bind /dev/null "$library"
         hidden=$((hidden + 1))
       done
       [ "$hidden" -gt 0 ] || { echo "no system library to hide" >&2; exit 1; }
       echo "hid $hidden system libraries"
       exec "$0" "$@"' "$venv/bin/python" "$ROOT/tests/deploy/wheel_install_check.py" \
       "$VERSION" "unix://$socket") || fail "$name: install check without the system's gRPC"
  else
    echo "SKIPPED: wheel_test: the check with the system's gRPC hidden needs root and unshare"
  fi
  log "$name: tests/python ($PYTEST_FILES)"
  files=()
  for file in $PYTEST_FILES; do files+=("$ROOT/tests/python/$file"); done
  # GPUKIT_BUILD_DIR names a folder without python/: the conftest imports the installed gpukit.
  (cd "$WORK" && GPUKIT_BUILD_DIR="$WORK/no-build" GPUKITD="$BUILD_DIR/daemon/gpukitd" \
     GPUKITCTL="$BUILD_DIR/client/cpp/gpukitctl" \
     "$venv/bin/python" -m pytest -p no:cacheprovider "${files[@]}" 2>&1 |
     tee "$WORK/pytest-$tag.log") || fail "$name: tests/python"
  # The conftest's header line names the package it tested.
  grep -q "^gpukit $VERSION from $venv/lib/python3\.[0-9]*/site-packages/gpukit\$" \
    "$WORK/pytest-$tag.log" || fail "$name: pytest did not test the venv's gpukit"
  tested=$((tested + 1))
done
[ $tested -gt 0 ] || { echo "SKIPPED: wheel_test: no interpreter for any wheel"; exit 77; }
echo "OK: wheel_test: $tested wheel(s) install and pass from their venvs"
