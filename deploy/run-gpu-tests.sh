#!/usr/bin/env bash
# Runs a gpukit bundle's GPU tests (what `ctest -L gpu` runs in the build tree) with the
# bundle's own libraries, then the Python client's suite (tests/python) against gpukitd on the
# GPU, and reports them as ctest does. deploy/bundle.sh copies this file into the bundle as
# bin/run-gpu-tests.sh, with the list of test binaries filled in; it does not run from deploy/.
#
#   bin/run-gpu-tests.sh                          # all of them
#   bin/run-gpu-tests.sh -R cuda_device           # those whose name matches a regex
#   bin/run-gpu-tests.sh -R python_tests          # the Python suite only
#   bin/run-gpu-tests.sh -- --gtest_filter='*Ptx*' # extra flags for every test binary
#
# A binary fails when it exits non-zero (or runs past TIMEOUT seconds, default 300); it is
# skipped only when none of its tests passed and some skipped (no GPU here); else it passed.
#
# python_tests is `$PYTHON -m pytest tests/python` (PYTHON default python3) with the bundle's
# package (python/) and binaries, and GPUKIT_TEST_BACKEND=cuda (set it to cpu to run the
# suite on the CPU backend); PYTEST_ADDOPTS passes options to pytest (e.g. '-k interop -v').
# Its line shows pytest's summary and its exit status counts like a binary's. It is skipped
# when the bundle has no Python package, when $PYTHON has no pytest or the bundle no module
# for its version, and, for the CUDA backend, where there is no NVIDIA driver.
#
# Full logs go to LOG_DIR (default: a new temporary directory). Exit status 0 when nothing
# failed.
set -uo pipefail
BUNDLE="$(cd "$(dirname "$0")/.." && pwd)"
HOST_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
TESTS=(@GPU_TESTS@)
if [ -d "$BUNDLE/python/gpukit" ] && [ -d "$BUNDLE/tests/python" ]; then TESTS+=(python_tests); fi
TIMEOUT="${TIMEOUT:-300}"
PYTHON="${PYTHON:-python3}"
LOG_DIR="${LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/gpukit-gpu-tests.XXXXXX")}"
mkdir -p "$LOG_DIR"
regex=""
if [ "${1:-}" = "-R" ]; then regex="$2"; shift 2; fi
[ "${1:-}" = "--" ] && shift
selected=()
for t in "${TESTS[@]}"; do
  if [ -z "$regex" ] || [[ "$t" =~ $regex ]]; then selected+=("$t"); fi
done

# The Python suite. Its process gets python/lib, the bundle's libraries less libstdc++,
# libgcc_s, zlib and OpenSSL, instead of lib/: a Python that imports torch needs the host's
# newer C++ runtime, and a process holds one (deploy/bundle.sh says more where it makes
# python/lib). gpukitd, which the suite starts, finds the rest there when it carries no RPATH.
run_python_tests() {  # says why it skips, or runs pytest and returns its status
  local version module
  local backend="${GPUKIT_TEST_BACKEND:-cuda}"
  if ! "$PYTHON" -c 'import pytest' >/dev/null 2>&1; then
    echo "skipped: $PYTHON cannot import pytest"
    return 0
  fi
  version="$("$PYTHON" -c 'import sys; print("%d%d" % sys.version_info[:2])')"
  module="$(ls "$BUNDLE"/python/gpukit/_gpukit.cpython-"$version"-*.so 2>/dev/null | head -n 1)"
  if [ -z "$module" ]; then
    echo "skipped: the bundle has no module for $PYTHON (Python ${version:0:1}.${version:1}):" \
      "$(cd "$BUNDLE/python/gpukit" && ls _gpukit*.so 2>/dev/null | tr '\n' ' ')"
    return 0
  fi
  if [ "$backend" = "cuda" ] && [ ! -e /dev/nvidiactl ]; then
    echo "skipped: no NVIDIA driver here (/dev/nvidiactl); GPUKIT_TEST_BACKEND=cpu runs the" \
      "suite on the CPU backend"
    return 0
  fi
  LD_LIBRARY_PATH="$BUNDLE/python/lib${HOST_LD_LIBRARY_PATH:+:$HOST_LD_LIBRARY_PATH}" \
    PYTHONPATH="$BUNDLE/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1 \
    GPUKITD="$BUNDLE/bin/gpukitd" GPUKITCTL="$BUNDLE/bin/gpukitctl" \
    GPUKIT_TEST_BACKEND="$backend" \
    timeout "$TIMEOUT" "$PYTHON" -m pytest "$BUNDLE/tests/python" -q -rs -p no:cacheprovider
}

total=${#selected[@]}
echo "Test project $BUNDLE (logs in $LOG_DIR)"
passed=0; failed=(); skipped=(); i=0
for t in "${selected[@]}"; do
  i=$((i + 1))
  echo "    Start $i: $t"
  start=$(date +%s.%N)
  if [ "$t" = python_tests ]; then
    run_python_tests >"$LOG_DIR/$t.log" 2>&1
  else
    timeout "$TIMEOUT" "$BUNDLE/bin/$t" "$@" >"$LOG_DIR/$t.log" 2>&1
  fi
  rc=$?
  secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
  count() {  # what gtest's closing summary says, e.g. "[  SKIPPED ] 8 tests, listed below:"
    local n; n=$(sed -n "s/^\[  $1 *\] \([0-9]*\) tests\{0,1\}[.,].*/\1/p" "$LOG_DIR/$t.log" | head -n 1)
    echo "${n:-0}"
  }
  if [ "$t" = python_tests ]; then
    # pytest -q closes with its summary ("12 passed, 3 skipped in 4.56s"); a skip says why.
    summary="(pytest: $(grep -v '^ *$' "$LOG_DIR/$t.log" | tail -n 1))"
  else
    summary="(gtest: $(count PASSED) passed, $(count SKIPPED) skipped, $(count FAILED) failed)"
  fi
  if [ $rc -ne 0 ]; then
    result="***Failed"; [ $rc -eq 124 ] && result="***Timeout"
    failed+=("$i - $t")
  elif grep -q '^\[  PASSED  \] 0 tests\.' "$LOG_DIR/$t.log" &&
       grep -q '^\[  SKIPPED \] ' "$LOG_DIR/$t.log"; then
    result="***Skipped"; skipped+=("$i - $t")
  elif [ "$t" = python_tests ] && grep -q '^skipped: ' "$LOG_DIR/$t.log"; then
    result="***Skipped"; skipped+=("$i - $t")
  else
    result="   Passed"; passed=$((passed + 1))
  fi
  printf '%d/%d Test #%d: %s %s %s %8s sec  %s\n' "$i" "$total" "$i" "$t" \
    "$(printf '%*s' $((40 - ${#t})) '' | tr ' ' '.')" "$result" "$secs" "$summary"
  if [ $rc -ne 0 ]; then sed 's/^/    | /' "$LOG_DIR/$t.log" | tail -n 200; fi
done
echo
ran=$((total - ${#skipped[@]}))
pct=100; [ $ran -gt 0 ] && pct=$((100 * passed / ran))
echo "$pct% tests passed, ${#failed[@]} tests failed out of $total"
if [ ${#skipped[@]} -gt 0 ]; then
  echo; echo "The following tests did not run:"
  for s in "${skipped[@]}"; do echo "	$s (Skipped)"; done
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo; echo "The following tests FAILED:"
  for f in "${failed[@]}"; do echo "	$f (Failed)"; done
  exit 1
fi
