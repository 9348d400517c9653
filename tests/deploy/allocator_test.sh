#!/usr/bin/env bash
# gpukitd and gpukit-executor allocate with jemalloc (GPUKIT_JEMALLOC, the default): malloc and
# free of every library they load, glibc's own calls among them, bind to libjemalloc (the
# dynamic loader's LD_DEBUG=bindings), not to libc.
#   tests/deploy/allocator_test.sh BUILD_DIR
set -euo pipefail
BUILD_DIR="$1"
for program in "$BUILD_DIR/daemon/gpukitd --version" "$BUILD_DIR/daemon/gpukit-executor --version"; do
  bindings="$(LD_DEBUG=bindings $program 2>&1 >/dev/null || true)"
  for symbol in malloc free; do
    to="$(grep -E "normal symbol \`$symbol'" <<<"$bindings" | sed -E 's/.* to ([^ ]+) .*/\1/' | sort -u)"
    if [ -z "$to" ]; then
      echo "FAIL: ${program%% *}: no binding of $symbol seen"; exit 1
    fi
    if grep -qv "libjemalloc" <<<"$to"; then
      echo "FAIL: ${program%% *}: $symbol binds to"; echo "$to"; exit 1
    fi
  done
  echo "ok: ${program%% *}: malloc and free are jemalloc's"
done
