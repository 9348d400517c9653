#!/usr/bin/env bash
# Checks deploy/gpukitd.service with `systemd-analyze verify` and deploy/gpukit.sysusers.conf
# with `systemd-sysusers` into a scratch root. Exits 77 (CTest: skipped) with a message when
# the tools are missing.
#   tests/deploy/systemd_unit_test.sh SOURCE_DIR
set -euo pipefail
SOURCE_DIR="$1"
for tool in systemd-analyze systemd-sysusers; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIPPED: $tool is not installed (Debian: systemd)"
    exit 77
  fi
done
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

# verify checks that ExecStart's program exists, which /usr/local/bin/gpukitd need not here:
# point it at a program that does (the unit's settings are what is checked).
sed "s|/usr/local/bin/gpukitd|/bin/true|" "$SOURCE_DIR/deploy/gpukitd.service" \
  >"$scratch/gpukitd.service"
if ! out="$(systemd-analyze verify "$scratch/gpukitd.service" 2>&1)"; then
  echo "FAIL: systemd-analyze verify:"; echo "$out"; exit 1
fi
# verify reports some problems as warnings and still succeeds: none may concern the unit.
if grep -F "gpukitd.service" <<<"$out"; then
  echo "FAIL: systemd-analyze verify warns about the unit (above)"; exit 1
fi
for setting in "Type=notify" "WatchdogSec=" "ExecReload=/bin/kill -HUP \$MAINPID" "User=gpukit" \
               "RuntimeDirectory=gpukit" "NoNewPrivileges=yes" "ProtectSystem=strict" \
               "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"; do
  grep -q -- "^$setting" "$scratch/gpukitd.service" ||
    { echo "FAIL: the unit has no $setting"; exit 1; }
done
# Settings that would take the GPU away.
for forbidden in "PrivateDevices=yes" "ProtectClock=yes" "DevicePolicy=closed" "DevicePolicy=strict"; do
  if grep -qxF "$forbidden" "$scratch/gpukitd.service"; then
    echo "FAIL: $forbidden hides /dev/nvidia* from gpukitd"; exit 1
  fi
done

# The sysusers entry creates the unit's user and group in a scratch root.
mkdir -p "$scratch/root/etc"
systemd-sysusers --root="$scratch/root" "$SOURCE_DIR/deploy/gpukit.sysusers.conf"
grep -q '^gpukit:' "$scratch/root/etc/passwd" || { echo "FAIL: no gpukit user"; exit 1; }
grep -q '^gpukit:' "$scratch/root/etc/group" || { echo "FAIL: no gpukit group"; exit 1; }
echo "OK: gpukitd.service verifies; gpukit.sysusers.conf creates user and group gpukit"
