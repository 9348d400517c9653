#!/usr/bin/env bash
# Makes a relocatable gpukit bundle: a directory (and a .tar.gz beside it) that runs on a GPU
# host without gpukit's build dependencies, e.g. Ubuntu 24.04 without gRPC:
#
#   gpukit-<version>-<git sha>/
#     bin/      gpukitd, gpukitctl, every test and benchmark executable of the build (and
#               gpukit_integration_worker, which GPU tests spawn beside themselves), and
#               run-gpu-tests.sh (the GPU tests, as `ctest -L gpu` runs them in the build)
#     lib/      every shared library they need except glibc's own and the NVIDIA driver's
#               (libcuda always comes from the host's driver); libstdc++ and libgcc_s ship
#     etc/      gpukitd.json, the example configuration
#     env.sh    `source` it to put bin/ on PATH and lib/ on LD_LIBRARY_PATH
#     README.md how to run things from the bundle
#
# Usage:
#   deploy/bundle.sh                       # configure + build into build-bundle/, then bundle
#   BUILD_DIR=build deploy/bundle.sh       # bundle an existing build as it is
#
# Environment:
#   BUILD_DIR  an existing build tree to bundle as it is (default: build $ROOT/build-bundle,
#              whose executables carry RPATH $ORIGIN/../lib so they run from bin/ directly)
#   DIST_DIR   where the bundle and its .tar.gz go (default: $ROOT/dist)
#   VERSION    the name's suffix (default: project version and git short sha, "-dirty" when
#              the work tree has changes)
#   STRIP      1 (default) strips debug info from the bundled copies (symbols stay, so
#              backtraces keep function names); 0 keeps it
#   JOBS       build parallelism (default: nproc)
#   ALLOW_MISSING_TESTS  1 leaves out gpu tests that ctest knows but BUILD_DIR has not built
#              (default: that is an error)
#   BUNDLE_NVRTC   1 copies libnvrtc.so.13 and libnvrtc-builtins.so.13.0 from CUDA_LIB_DIR into
#              lib/ (about 113 MB, 49 MB gzipped; default 0)
#   BUNDLE_CUBLAS  1 copies libcublasLt.so.13 from CUDA_LIB_DIR into lib/ (about 540 MB, 380 MB
#              gzipped; default 0). It needs nothing beyond glibc (not libcublas).
#   CUDA_LIB_DIR   where those come from (default: /usr/local/cuda/lib64)
#
# gpukit dlopens NVRTC and cuBLASLt, so ldd does not see them, and they are large: by default
# the bundle carries neither and gpukit finds them on the host (CUDA toolkit, or PyTorch's
# nvidia-* wheels under site-packages/nvidia/*/lib; see runtime/jit/library_search.h, which
# searches the bundle's lib/ first). Without cuBLASLt, matmul runs on gpukit's own kernel.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIST_DIR="${DIST_DIR:-$ROOT/dist}"
STRIP="${STRIP:-1}"
JOBS="${JOBS:-$(nproc)}"

log() { echo "==> $*"; }
die() { echo "bundle.sh: $*" >&2; exit 1; }

# ---- Build (or take) the tree ----
if [ -n "${BUILD_DIR:-}" ]; then
  BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"
  log "bundling the existing build $BUILD_DIR (not rebuilt)"
else
  BUILD_DIR="$ROOT/build-bundle"
  log "configuring $BUILD_DIR (RPATH \$ORIGIN/../lib)"
  # DT_RPATH (--disable-new-dtags), unlike DT_RUNPATH, also serves the libraries' own
  # dependencies (libgrpc++ -> libgrpc -> libabsl_*), so lib/ is found for all of them.
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
    -DCMAKE_BUILD_RPATH='$ORIGIN/../lib' \
    -DCMAKE_EXE_LINKER_FLAGS='-Wl,--disable-new-dtags' \
    ${GPUKIT_CUDA_INCLUDE_DIR:+-DGPUKIT_CUDA_INCLUDE_DIR="$GPUKIT_CUDA_INCLUDE_DIR"} >/dev/null
  log "building (-j $JOBS)"
  cmake --build "$BUILD_DIR" -j "$JOBS"
fi
[ -f "$BUILD_DIR/CMakeCache.txt" ] || die "$BUILD_DIR is not a CMake build tree"

# ---- Name ----
if [ -z "${VERSION:-}" ]; then
  VERSION="$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")"
  if SHA="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"; then
    git -C "$ROOT" diff --quiet HEAD 2>/dev/null || SHA="$SHA-dirty"
    VERSION="${VERSION:+$VERSION-}$SHA"
  fi
  VERSION="${VERSION:-unknown}"
fi
NAME="gpukit-$VERSION"
BUNDLE="$DIST_DIR/$NAME"
log "bundle $BUNDLE"
rm -rf "$BUNDLE" "$BUNDLE.tar.gz"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib" "$BUNDLE/etc"

# ---- Executables: every ELF program of the build (it has a program interpreter) ----
is_program() { readelf -l "$1" 2>/dev/null | grep -q 'Requesting program interpreter'; }
mapfile -t PROGRAMS < <(find "$BUILD_DIR" -path '*/CMakeFiles' -prune -o -type f -perm -u+x \
                        -print | sort)
count=0
for program in "${PROGRAMS[@]}"; do
  is_program "$program" || continue
  name="$(basename "$program")"
  [ -e "$BUNDLE/bin/$name" ] && die "two executables named $name in $BUILD_DIR"
  cp "$program" "$BUNDLE/bin/$name"
  count=$((count + 1))
done
for required in gpukitd gpukitctl; do
  [ -f "$BUNDLE/bin/$required" ] || die "$BUILD_DIR has no $required: build it first"
done
log "bin/: $count executables"

# ---- Shared libraries: what ldd resolves, less glibc and the NVIDIA driver ----
# glibc's libraries must come from the host (its loader and libc go together; the host's
# glibc 2.39 is newer than the build's 2.36, so binaries built here run there).
is_host_library() {
  case "$1" in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libmvec.so.* | libpthread.so.* | \
      libdl.so.* | librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libnss_*.so.* | \
      libBrokenLocale.so.* | libthread_db.so.*) return 0 ;;
    libcuda.so* | libnvidia-*.so* | libnvcuvid.so* | libcudadebugger.so*) return 0 ;;
  esac
  return 1
}
declare -A SHIPPED=()
for program in "$BUNDLE"/bin/*; do
  while read -r line; do
    # "libfoo.so.1 => /usr/lib/x86_64-linux-gnu/libfoo.so.1 (0x...)", or "... => not found"
    soname="$(awk '{print $1}' <<<"$line")"
    soname="${soname##*/}"  # the loader's line names it by path
    path="$(awk '$2 == "=>" {print $3}' <<<"$line")"
    [ -n "$soname" ] || continue
    is_host_library "$soname" && continue
    case "$line" in *"not found"*) die "$(basename "$program") needs $soname, which ldd cannot find" ;; esac
    [ -n "$path" ] || continue
    [ -n "${SHIPPED[$soname]:-}" ] && continue
    cp -L "$path" "$BUNDLE/lib/$soname"
    SHIPPED[$soname]="$path"
  done < <(ldd "$program" 2>/dev/null || true)
done
log "lib/: ${#SHIPPED[@]} shared libraries"

if [ "$STRIP" = "1" ]; then
  log "stripping debug info from the bundled copies"
  chmod u+w "$BUNDLE"/bin/* "$BUNDLE"/lib/*
  strip --strip-debug "$BUNDLE"/bin/* "$BUNDLE"/lib/* 2>/dev/null || true
fi

# ---- CUDA libraries gpukit dlopens (opt-in: see BUNDLE_NVRTC, BUNDLE_CUBLAS) ----
CUDA_LIB_DIR="${CUDA_LIB_DIR:-/usr/local/cuda/lib64}"
copy_cuda_library() {
  if [ -f "$CUDA_LIB_DIR/$1" ]; then
    cp -L "$CUDA_LIB_DIR/$1" "$BUNDLE/lib/$1"
    log "lib/: $1 from $CUDA_LIB_DIR ($(du -h "$BUNDLE/lib/$1" | cut -f1))"
  else
    log "warning: $CUDA_LIB_DIR/$1 not found; not bundled (gpukit looks for it on the host)"
  fi
}
if [ "${BUNDLE_NVRTC:-0}" = "1" ]; then
  copy_cuda_library libnvrtc.so.13
  copy_cuda_library libnvrtc-builtins.so.13.0
fi
if [ "${BUNDLE_CUBLAS:-0}" = "1" ]; then
  copy_cuda_library libcublasLt.so.13
else
  log "lib/: no libcublasLt (BUNDLE_CUBLAS=1 adds it, about 380 MB gzipped); found on the host if there"
fi

# ---- Can the binaries find lib/ by themselves? ----
if readelf -d "$BUNDLE/bin/gpukitd" | grep -E '\((RPATH|RUNPATH)\)' | grep -qF '$ORIGIN/../lib'; then
  RPATH_NOTE="The executables carry RPATH \$ORIGIN/../lib: they find lib/ when run from bin/ directly."
else
  RPATH_NOTE="The executables carry no RPATH to lib/ (this build was not configured by bundle.sh): run them through env.sh or with LD_LIBRARY_PATH=<bundle>/lib, as run-gpu-tests.sh does."
  log "note: $BUILD_DIR's executables have no RPATH \$ORIGIN/../lib; env.sh and run-gpu-tests.sh set LD_LIBRARY_PATH"
fi

# ---- The GPU tests, as `ctest -L gpu` knows them ----
mapfile -t REGISTERED < <(cd "$BUILD_DIR" && ctest -N -L gpu | sed -n 's/^ *Test *#[0-9]*: *//p')
GPU_TESTS=()
for test in "${REGISTERED[@]}"; do
  if [ -f "$BUNDLE/bin/$test" ]; then
    GPU_TESTS+=("$test")
  elif [ "${ALLOW_MISSING_TESTS:-0}" = "1" ]; then
    log "warning: gpu test $test is registered with ctest but not built; left out"
  else
    die "gpu test $test is registered with ctest but not built (build it, or ALLOW_MISSING_TESTS=1)"
  fi
done
log "gpu tests: ${GPU_TESTS[*]:-none}"
# GPU tests that start other programs of the build look for them beside themselves in bin/
# (tests/integration/binary_path.h). Every executable was copied above; this makes sure the
# build had them.
for test in "${GPU_TESTS[@]}"; do
  case "$test" in
    gpu_multi_client_test) needs=(gpukitd gpukit_integration_worker) ;;
    *) needs=() ;;
  esac
  for program in "${needs[@]}"; do
    [ -f "$BUNDLE/bin/$program" ] || die "gpu test $test needs $program in bin/: build it first"
  done
done

cat >"$BUNDLE/bin/run-gpu-tests.sh" <<EOF
#!/usr/bin/env bash
# Runs this bundle's GPU tests (what \`ctest -L gpu\` runs in the build tree) with the bundle's
# own libraries, and reports them as ctest does. Generated by deploy/bundle.sh.
#
#   bin/run-gpu-tests.sh                          # all of them
#   bin/run-gpu-tests.sh -R cuda_device           # those whose name matches a regex
#   bin/run-gpu-tests.sh -- --gtest_filter='*Ptx*' # extra flags for every test binary
#
# A binary fails when it exits non-zero (or runs past TIMEOUT seconds, default 300); it is
# skipped only when none of its tests passed and some skipped (no GPU here); else it passed.
# Full logs go to LOG_DIR (default: a new temporary directory). Exit status 0 when nothing
# failed.
set -uo pipefail
BUNDLE="\$(cd "\$(dirname "\$0")/.." && pwd)"
export LD_LIBRARY_PATH="\$BUNDLE/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
TESTS=(${GPU_TESTS[*]})
TIMEOUT="\${TIMEOUT:-300}"
LOG_DIR="\${LOG_DIR:-\$(mktemp -d "\${TMPDIR:-/tmp}/gpukit-gpu-tests.XXXXXX")}"
mkdir -p "\$LOG_DIR"
regex=""
if [ "\${1:-}" = "-R" ]; then regex="\$2"; shift 2; fi
[ "\${1:-}" = "--" ] && shift
selected=()
for t in "\${TESTS[@]}"; do
  if [ -z "\$regex" ] || [[ "\$t" =~ \$regex ]]; then selected+=("\$t"); fi
done
total=\${#selected[@]}
echo "Test project \$BUNDLE (logs in \$LOG_DIR)"
passed=0; failed=(); skipped=(); i=0
for t in "\${selected[@]}"; do
  i=\$((i + 1))
  echo "    Start \$i: \$t"
  start=\$(date +%s.%N)
  timeout "\$TIMEOUT" "\$BUNDLE/bin/\$t" "\$@" >"\$LOG_DIR/\$t.log" 2>&1
  rc=\$?
  secs=\$(awk -v s="\$start" -v e="\$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
  count() {  # what gtest's closing summary says, e.g. "[  SKIPPED ] 8 tests, listed below:"
    local n; n=\$(sed -n "s/^\\[  \$1 *\\] \\([0-9]*\\) tests\\{0,1\\}[.,].*/\\1/p" "\$LOG_DIR/\$t.log" | head -n 1)
    echo "\${n:-0}"
  }
  summary="(gtest: \$(count PASSED) passed, \$(count SKIPPED) skipped, \$(count FAILED) failed)"
  if [ \$rc -ne 0 ]; then
    result="***Failed"; [ \$rc -eq 124 ] && result="***Timeout"
    failed+=("\$i - \$t")
  elif grep -q '^\[  PASSED  \] 0 tests\.' "\$LOG_DIR/\$t.log" &&
       grep -q '^\[  SKIPPED \] ' "\$LOG_DIR/\$t.log"; then
    result="***Skipped"; skipped+=("\$i - \$t")
  else
    result="   Passed"; passed=\$((passed + 1))
  fi
  printf '%d/%d Test #%d: %s %s %s %8s sec  %s\n' "\$i" "\$total" "\$i" "\$t" \\
    "\$(printf '%*s' \$((40 - \${#t})) '' | tr ' ' '.')" "\$result" "\$secs" "\$summary"
  if [ \$rc -ne 0 ]; then sed 's/^/    | /' "\$LOG_DIR/\$t.log" | tail -n 200; fi
done
echo
ran=\$((total - \${#skipped[@]}))
pct=100; [ \$ran -gt 0 ] && pct=\$((100 * passed / ran))
echo "\$pct% tests passed, \${#failed[@]} tests failed out of \$total"
if [ \${#skipped[@]} -gt 0 ]; then
  echo; echo "The following tests did not run:"
  for s in "\${skipped[@]}"; do echo "	\$s (Skipped)"; done
fi
if [ \${#failed[@]} -gt 0 ]; then
  echo; echo "The following tests FAILED:"
  for f in "\${failed[@]}"; do echo "	\$f (Failed)"; done
  exit 1
fi
EOF
chmod +x "$BUNDLE/bin/run-gpu-tests.sh"

# ---- Configuration, environment, README ----
cp "$ROOT/deploy/gpukitd.json" "$BUNDLE/etc/gpukitd.json"
cat >"$BUNDLE/env.sh" <<'EOF'
# Source this file (`. gpukit-*/env.sh`) to run the bundle's programs from any directory.
GPUKIT_BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"
export PATH="$GPUKIT_BUNDLE/bin:$PATH"
export LD_LIBRARY_PATH="$GPUKIT_BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
EOF
cat >"$BUNDLE/README.md" <<EOF
# $NAME

A relocatable gpukit build (made by deploy/bundle.sh from $(basename "$BUILD_DIR")/ on
$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" || uname -s)). It needs glibc 2.36 or newer
and, for the CUDA backend, an NVIDIA driver for CUDA 12.0 or newer (libcuda.so.1 comes from the
driver; nothing here replaces it).

- GPU tests, as \`ctest -L gpu\` runs them: \`bin/run-gpu-tests.sh\` (see its header for -R and
  gtest flags).
- Anything else: \`. ./env.sh\` first, then e.g. \`gpukitd --config etc/gpukitd.json\`,
  \`gpukitctl status\`, \`runtime_test\`.
- $RPATH_NOTE
- The integration tests (integration_*_test) run from the build tree only: some look for
  gpukitctl and their worker at their paths there. The GPU tests that start gpukitd and
  workers (gpu_multi_client_test) find them here in bin/.
EOF

# ---- Archive ----
log "archiving $BUNDLE.tar.gz"
tar -C "$DIST_DIR" -czf "$BUNDLE.tar.gz" "$NAME"
log "done: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1)), $BUNDLE.tar.gz ($(du -sh "$BUNDLE.tar.gz" | cut -f1))"
