#!/usr/bin/env bash
# The .deb from end to end, on this machine: builds it from BUILD_DIR with deploy/deb.sh (a
# test build is allowed: the package never leaves this test), checks its name, version and
# Depends, installs it with dpkg, checks the installed files, the conffile and the service
# user, builds a program against the installed libgpukit (pkg-config gpukit), starts the
# installed /usr/bin/gpukitd as user gpukit on a temporary socket (CPU backend), runs
# `gpukitctl status` and that program against it, stops it, then removes the package (only
# the conffile stays) and purges it (nothing of it stays; the user gpukit does, as
# docs/operations.md says).
#
# Usage: tests/deploy/deb_test.sh BUILD_DIR   (tests/run_all.sh runs it after ctest)
# Environment: DEB=path packages nothing and tests that .deb instead.
# Exits 77 with the reason, having changed nothing, where it cannot run: not root, no dpkg
# tools, or a gpukit package already installed here (it is not this test's to replace).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD_DIR="$(cd "${1:?usage: deb_test.sh BUILD_DIR}" && pwd)"

skip() { echo "SKIPPED: deb_test: $*"; exit 77; }
fail() { echo "FAILED: deb_test: $*" >&2; exit 1; }
log() { echo "==> deb_test: $*"; }

[ "$(id -u)" = "0" ] || skip "needs root (dpkg -i into this machine)"
for tool in dpkg dpkg-deb dpkg-query dpkg-shlibdeps cpack setpriv pkg-config g++; do
  command -v "$tool" >/dev/null || skip "$tool not found"
done
if dpkg-query -W -f='${Status}' gpukit 2>/dev/null | grep -qv 'not-installed'; then
  skip "a gpukit package is installed here ($(dpkg-query -W -f='${Version} ${Status}' gpukit))"
fi

VERSION="$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")"
[ -n "$VERSION" ] || fail "no CMAKE_PROJECT_VERSION in $BUILD_DIR/CMakeCache.txt"
ARCH="$(dpkg --print-architecture)"
MULTIARCH="$(gcc -print-multiarch)"

WORK="$(mktemp -d)"
chmod 0755 "$WORK"
daemon_pid=""
user_existed=0
getent passwd gpukit >/dev/null && user_existed=1
cleanup() {
  if [ -n "$daemon_pid" ]; then kill "$daemon_pid" 2>/dev/null || true; fi
  if dpkg-query -W gpukit >/dev/null 2>&1; then dpkg --purge gpukit >/dev/null 2>&1 || true; fi
  # The user is the package's to keep (see purge below), not this test's: one it created goes.
  if [ "$user_existed" = "0" ] && getent passwd gpukit >/dev/null; then
    userdel gpukit 2>/dev/null || true
    if getent group gpukit >/dev/null; then groupdel gpukit 2>/dev/null || true; fi
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# ---- The package ----
if [ -n "${DEB:-}" ]; then
  deb="$DEB"
else
  log "building the .deb from $BUILD_DIR"
  deb="$(BUILD_DIR="$BUILD_DIR" DIST_DIR="$WORK/dist" ALLOW_FAULT_INJECTION=1 \
         "$ROOT/deploy/deb.sh" | tail -n 1)"
fi
[ "$(basename "$deb")" = "gpukit_${VERSION}_${ARCH}.deb" ] ||
  fail "package named $(basename "$deb"), expected gpukit_${VERSION}_${ARCH}.deb"
[ "$(dpkg-deb -f "$deb" Version)" = "$VERSION" ] ||
  fail "package version $(dpkg-deb -f "$deb" Version), project version $VERSION"
depends="$(dpkg-deb -f "$deb" Depends)"
# dpkg-shlibdeps' Depends name the libraries' packages, glibc's and gRPC's among them.
for package in libc6 libstdc++6 libgrpc++; do
  grep -q "$package" <<<"$depends" || fail "Depends lacks $package (shlibdeps?): $depends"
done
log "$(basename "$deb"): $(du -h "$deb" | cut -f1), Depends: $depends"

# ---- Install ----
log "dpkg -i"
dpkg -i "$deb" >"$WORK/dpkg-install.log" 2>&1 || { cat "$WORK/dpkg-install.log"; fail "dpkg -i"; }
for path in /usr/bin/gpukitd /usr/bin/gpukitctl /usr/bin/gpukit-device-plugin \
            /usr/libexec/gpukit/gpukit-executor /usr/libexec/gpukit/gpukit-compile-worker; do
  [ -x "$path" ] || fail "$path not installed as an executable"
done
for path in /usr/lib/systemd/system/gpukitd.service /usr/lib/sysusers.d/gpukit.conf \
            /etc/gpukit/gpukitd.json /usr/include/gpukit/client.h \
            /usr/include/gpukit/runtime/base/dtype.h "/usr/lib/$MULTIARCH/pkgconfig/gpukit.pc" \
            /usr/share/doc/gpukit/operations.md; do
  [ -f "$path" ] || fail "$path not installed"
done
ls "/usr/lib/$MULTIARCH"/libgpukit.so.* >/dev/null 2>&1 || fail "no libgpukit.so.* installed"
dpkg-query -W -f='${Conffiles}\n' gpukit | grep -q '^ /etc/gpukit/gpukitd.json ' ||
  fail "/etc/gpukit/gpukitd.json is not a conffile"
unit=/usr/lib/systemd/system/gpukitd.service
grep -q '^ExecStart=/usr/bin/gpukitd --config /etc/gpukit/gpukitd.json' "$unit" ||
  fail "the unit's ExecStart is not the package's gpukitd and config: $(grep ExecStart= "$unit")"
! grep -q '/usr/local' "$unit" || fail "the unit names /usr/local: $(grep /usr/local "$unit")"
getent passwd gpukit >/dev/null || fail "postinst created no user gpukit"
[ "$(/usr/bin/gpukitd --version)" = "gpukitd $VERSION" ] ||
  fail "/usr/bin/gpukitd --version: '$(/usr/bin/gpukitd --version)', not 'gpukitd $VERSION'"

# ---- A program against the installed libgpukit ----
log "building a client against /usr/lib/$MULTIARCH/libgpukit (pkg-config gpukit)"
cat >"$WORK/client.cc" <<'CC'
#include <cstdio>
#include <vector>

#include "gpukit/client.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  gpukit::ClientOptions options;
  options.address = argv[1];
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  auto a = (*client)->FromVector<float>({1, 2, 3, 4}, {2, 2});
  auto b = (*client)->FromVector<float>({10, 20}, {2});
  if (!a.ok() || !b.ok()) return 1;
  auto c = (*client)->Add(*a, *b);
  if (!c.ok()) return 1;
  auto values = c->ToVector<float>();
  if (!values.ok()) return 1;
  for (float value : *values) std::printf("%g ", value);
  std::printf("\n");
  return 0;
}
CC
# shellcheck disable=SC2046
g++ -o "$WORK/client" "$WORK/client.cc" $(pkg-config --cflags --libs gpukit) ||
  fail "a program does not build against the installed libgpukit"

# ---- The installed gpukitd, as the service user, on a temporary socket ----
mkdir "$WORK/run" && chown gpukit:gpukit "$WORK/run"
socket="$WORK/run/gpukitd.sock"
log "starting /usr/bin/gpukitd as gpukit on $socket (CPU backend)"
setpriv --reuid=gpukit --regid=gpukit --init-groups \
  /usr/bin/gpukitd --backend cpu --listen "unix://$socket" >"$WORK/gpukitd.log" 2>&1 &
daemon_pid=$!
# Readiness is its "listening on" line; the loop ends on it, on exit, or after 60 s.
for _ in $(seq 600); do
  grep -q 'listening on' "$WORK/gpukitd.log" && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$WORK/gpukitd.log"; fail "gpukitd exited"; }
  sleep 0.1
done
if ! grep -q 'listening on' "$WORK/gpukitd.log"; then
  cat "$WORK/gpukitd.log"
  fail "gpukitd never listened"
fi
status="$(/usr/bin/gpukitctl --addr "unix://$socket" status)" || fail "gpukitctl status failed"
echo "$status"
grep -q "$VERSION" <<<"$status" || fail "gpukitctl status does not show version $VERSION"
grep -qw cpu <<<"$status" || fail "gpukitctl status does not show the cpu backend"
sum="$("$WORK/client" "unix://$socket")" || fail "the libgpukit program failed against gpukitd"
[ "$sum" = "11 22 13 24 " ] || fail "the libgpukit program computed '$sum'"
kill -TERM "$daemon_pid"
rc=0
wait "$daemon_pid" || rc=$?
daemon_pid=""
[ "$rc" = "0" ] || { cat "$WORK/gpukitd.log"; fail "gpukitd exited $rc after SIGTERM"; }
[ ! -e "$socket" ] || fail "gpukitd left its socket"

# ---- Remove, then purge ----
mapfile -t FILES < <(dpkg -L gpukit | while read -r path; do
                       if [ -f "$path" ] || [ -L "$path" ]; then echo "$path"; fi
                     done)
[ ${#FILES[@]} -gt 10 ] || fail "dpkg -L gpukit lists ${#FILES[@]} files"
log "dpkg -r (${#FILES[@]} files)"
dpkg -r gpukit >"$WORK/dpkg-remove.log" 2>&1 || { cat "$WORK/dpkg-remove.log"; fail "dpkg -r"; }
for path in "${FILES[@]}"; do
  if [ "$path" = /etc/gpukit/gpukitd.json ]; then
    [ -f "$path" ] || fail "dpkg -r removed the conffile $path"
  else
    if [ -e "$path" ] || [ -L "$path" ]; then fail "dpkg -r left $path"; fi
  fi
done
log "dpkg --purge"
if ! dpkg --purge gpukit >"$WORK/dpkg-purge.log" 2>&1; then
  cat "$WORK/dpkg-purge.log"
  fail "dpkg --purge"
fi
for path in "${FILES[@]}" /etc/gpukit /usr/libexec/gpukit /usr/include/gpukit \
            /usr/share/doc/gpukit; do
  [ ! -e "$path" ] || fail "dpkg --purge left $path"
done
! dpkg-query -W gpukit >/dev/null 2>&1 || fail "dpkg still knows gpukit after purge"
getent passwd gpukit >/dev/null || fail "purge removed the user gpukit (documented: it stays)"
echo "OK: deb_test: $(basename "$deb") installs, serves (gpukitctl status, libgpukit)," \
     "removes and purges cleanly"
