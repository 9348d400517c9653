#!/usr/bin/env bash
# Installs the dependencies, builds gpukit with warnings as errors, and runs the whole test
# suite: the unit tests under AddressSanitizer and UndefinedBehaviorSanitizer, the Python
# client's pytest suite (tests/python, with the Python module of the regular build), then
# unit, integration and GPU tests in the regular build (ctest), then the .deb of that build
# (tests/deploy/deb_test.sh: installed, run and purged; skipped where not root) and the wheel
# (deploy/wheel.sh, tests/deploy/wheel_test.sh: installed into a fresh venv). The output
# closes with ctest's summary, pytest's summary line and the overall verdict. GPU tests
# (label gpu) run where a GPU is present and are reported as skipped elsewhere. .ci/run calls
# exactly this script.
#
# Environment: BUILD_DIR (default build/), SKIP_SANITIZE=1 to skip the sanitizer pass,
# SKIP_WHEELS=1 to skip the wheel,
# PYTHON (default python3: the interpreter the module is built for and pytest runs with).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
ASAN_BUILD_DIR="${ASAN_BUILD_DIR:-$ROOT/build-asan}"
JOBS="${JOBS:-$(nproc)}"
start=$(date +%s)

"$ROOT/deploy/install-deps.sh"
. "$ROOT/deploy/cuda-env.sh"  # the CUDA headers: the toolkit's, or those install-deps fetched

# The module must be built for the interpreter that runs pytest (a pyenv shim resolves to it).
PYTHON="$(${PYTHON:-python3} -c 'import sys; print(sys.executable)')"

echo "==> build (warnings are errors) into $BUILD_DIR, Python module for $PYTHON"
BUILD_DIR="$BUILD_DIR" "$ROOT/deploy/build.sh" -DGPUKIT_WERROR=ON \
  -DGPUKIT_BUILD_PYTHON=ON -DGPUKIT_FAULT_INJECTION=ON -DPython_EXECUTABLE="$PYTHON"

status=0
# Every gpukitd, executor and Python module the suites start keeps absl's lock-order check,
# which releases turn off (runtime/base/mutex_mode.h): a lock-order cycle fails its test
# (ctest and tests/python set it too; this covers the package and wheel checks).
export GPUKIT_MUTEX_DEADLOCK_CHECK=1
if [ "${SKIP_SANITIZE:-0}" != "1" ]; then
  echo "==> unit tests under ASan + UBSan ($ASAN_BUILD_DIR)"
  # Its tests run on the CPU: the built-in kernels are not precompiled a second time there
  # (nvcc's share of the regular build), and the fatbin tests skip.
  cmake -S "$ROOT" -B "$ASAN_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    ${GPUKIT_CUDA_INCLUDE_DIR:+"-DGPUKIT_CUDA_INCLUDE_DIR=$GPUKIT_CUDA_INCLUDE_DIR"} \
    -DGPUKIT_WERROR=ON -DGPUKIT_SANITIZE=ON -DGPUKIT_BUILD_BENCHMARKS=OFF \
    -DGPUKIT_BUILD_PYTHON=OFF -DGPUKIT_PRECOMPILE_KERNELS=OFF -DGPUKIT_FAULT_INJECTION=ON >/dev/null
  cmake --build "$ASAN_BUILD_DIR" -j "$JOBS" --target unit_tests
  (cd "$ASAN_BUILD_DIR" && ctest -L unit --output-on-failure -j "$JOBS" --timeout 600) || status=1
fi

# pytest before ctest; its summary line is repeated at the end, under ctest's.
echo "==> pytest: Python client (tests/python, gpukit from $BUILD_DIR/python)"
PYTEST_LOG="$BUILD_DIR/pytest.log"
GPUKIT_BUILD_DIR="$BUILD_DIR" "$PYTHON" -m pytest "$ROOT/tests/python" -q -p no:cacheprovider \
  2>&1 | tee "$PYTEST_LOG" || status=1
pytest_summary="$(tail -n 1 "$PYTEST_LOG")"

echo "==> ctest: unit, integration and gpu tests ($BUILD_DIR)"
(cd "$BUILD_DIR" && ctest --output-on-failure -j "$JOBS" --timeout 600) || status=1

# The .deb (deploy/deb.sh) of this build: installed with dpkg, run, removed and purged. It
# needs root; elsewhere it says why it skipped (exit 77) and the run goes on.
echo "==> deb: package, install, run, purge (tests/deploy/deb_test.sh)"
deb_status=0
"$ROOT/tests/deploy/deb_test.sh" "$BUILD_DIR" || deb_status=$?
[ $deb_status -eq 0 ] || [ $deb_status -eq 77 ] || status=1

# The wheel (deploy/wheel.sh, for $PYTHON only: about 3.5 minutes on 2 cores with a cold
# ccache), installed into a fresh venv and tested from there (tests/deploy/wheel_test.sh).
# SKIP_WHEELS=1 leaves it out.
if [ "${SKIP_WHEELS:-0}" != "1" ]; then
  echo "==> wheel: build for $PYTHON, install into a venv, test (tests/deploy/wheel_test.sh)"
  if mapfile -t WHEELS < <("$ROOT/deploy/wheel.sh" "$PYTHON") && [ ${#WHEELS[@]} -gt 0 ]; then
    wheel_status=0
    "$ROOT/tests/deploy/wheel_test.sh" "$BUILD_DIR" "${WHEELS[@]}" || wheel_status=$?
    [ $wheel_status -eq 0 ] || [ $wheel_status -eq 77 ] || status=1
  else
    echo "FAILED: deploy/wheel.sh"
    status=1
  fi
fi

echo "==> pytest: $pytest_summary"
echo "==> done in $(( $(date +%s) - start )) s; $([ $status -eq 0 ] && echo 'all suites passed' || echo 'FAILURES above')"
exit $status
