#!/usr/bin/env bash
# Installs the dependencies, builds gpukit with warnings as errors, and runs the whole test
# suite: the unit tests under AddressSanitizer and UndefinedBehaviorSanitizer, then unit,
# integration and GPU tests in the regular build (ctest), whose summary closes the output. GPU tests (label gpu) run where a GPU is present and are
# reported as skipped elsewhere. .ci/run calls exactly this script.
#
# Environment: BUILD_DIR (default build/), SKIP_SANITIZE=1 to skip the sanitizer pass.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
ASAN_BUILD_DIR="${ASAN_BUILD_DIR:-$ROOT/build-asan}"
JOBS="${JOBS:-$(nproc)}"
start=$(date +%s)

"$ROOT/deploy/install-deps.sh"

echo "==> build (warnings are errors) into $BUILD_DIR"
BUILD_DIR="$BUILD_DIR" "$ROOT/deploy/build.sh" -DGPUKIT_WERROR=ON

status=0
if [ "${SKIP_SANITIZE:-0}" != "1" ]; then
  echo "==> unit tests under ASan + UBSan ($ASAN_BUILD_DIR)"
  cmake -S "$ROOT" -B "$ASAN_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DGPUKIT_WERROR=ON -DGPUKIT_SANITIZE=ON -DGPUKIT_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build "$ASAN_BUILD_DIR" -j "$JOBS" --target unit_tests
  (cd "$ASAN_BUILD_DIR" && ctest -L unit --output-on-failure -j "$JOBS" --timeout 600) || status=1
fi

# Last, so that its summary closes the output.
echo "==> ctest: unit, integration and gpu tests ($BUILD_DIR)"
(cd "$BUILD_DIR" && ctest --output-on-failure -j "$JOBS" --timeout 600) || status=1

echo "==> done in $(( $(date +%s) - start )) s; $([ $status -eq 0 ] && echo 'all suites passed' || echo 'FAILURES above')"
exit $status
