#!/usr/bin/env bash
# gpukitd and gpukit-executor allocate with jemalloc (GPUKIT_JEMALLOC, the default): malloc and
# free of every library they load, glibc's own calls among them, bind to libjemalloc (the
# dynamic loader's LD_DEBUG=bindings), not to libc; and jemalloc runs with gpukit's settings
# (runtime/base/allocator_settings.h), as its statistics at exit show them.
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
  stats="$(MALLOC_CONF=stats_print:true $program 2>&1 >/dev/null || true)"
  for option in "opt.background_thread: true" "opt.dirty_decay_ms: 1000" "opt.muzzy_decay_ms: 0"; do
    if ! grep -qF "$option" <<<"$stats"; then
      echo "FAIL: ${program%% *}: jemalloc runs without \"$option\""; exit 1
    fi
  done
  echo "ok: ${program%% *}: jemalloc returns freed pages within a second"
done
