#!/usr/bin/env bash
# Quick start: installs the dependencies, builds gpukit, starts gpukitd with its embedded
# default configuration (the CPU simulation backend where there is no GPU) on its default
# unix socket, and shows it working with gpukitctl and the demo client. gpukitd keeps
# running afterwards; the script prints how to stop it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"

"$ROOT/deploy/install-deps.sh"
echo "==> building into $BUILD_DIR"
BUILD_DIR="$BUILD_DIR" "$ROOT/deploy/build.sh" >/dev/null

BIN="$BUILD_DIR"
GPUKITD="$BIN/daemon/gpukitd"
GPUKITCTL="$BIN/client/cpp/gpukitctl"
DEMO="$BIN/client/cpp/gpukit_demo"
LOG="${TMPDIR:-/tmp}/gpukitd-quickstart-$(id -u).log"

if "$GPUKITCTL" status >/dev/null 2>&1; then
  echo "==> a gpukitd is already running on the default address; using it"
  STARTED=""
else
  echo "==> starting gpukitd (log: $LOG)"
  nohup "$GPUKITD" >"$LOG" 2>&1 &
  STARTED=$!
  for _ in $(seq 1 100); do
    if "$GPUKITCTL" --timeout 1s status >/dev/null 2>&1; then break; fi
    if ! kill -0 "$STARTED" 2>/dev/null; then
      echo "gpukitd exited; its log:" >&2
      cat "$LOG" >&2
      exit 1
    fi
    sleep 0.1
  done
  sed 's/^/    gpukitd | /' "$LOG"
fi

echo
echo "\$ gpukitctl status"
"$GPUKITCTL" status
echo
echo "\$ gpukitctl devices"
"$GPUKITCTL" devices
echo
echo "\$ gpukit_demo"
"$DEMO"
echo
if [ -n "$STARTED" ]; then
  echo "gpukitd is running (pid $STARTED, log $LOG). Try: $GPUKITCTL sessions"
  echo "Stop it with: kill $STARTED"
fi
