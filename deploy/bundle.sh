#!/usr/bin/env bash
# Makes a relocatable gpukit bundle: a directory (and a .tar.gz beside it) that runs on a GPU
# host without gpukit's build dependencies, e.g. Ubuntu 24.04 without gRPC:
#
#   gpukit-<version>-<git sha>/
#     bin/      gpukitd, gpukitctl, gpukit-device-plugin (Kubernetes, deploy/kubernetes/), every
#               test and benchmark executable of the build (and
#               gpukit_integration_worker, which GPU tests spawn beside themselves),
#               run-gpu-tests.sh (the GPU tests, as `ctest -L gpu` runs them in the build, then
#               the Python suite on the GPU; from deploy/run-gpu-tests.sh) and the Python
#               benches of tests/bench: python_overhead_bench.py (Python's `a + b` against
#               C++'s), executor_overhead_bench.py and qos_isolation_bench.py (issue 16: a
#               victim beside a matmul flood through gpukitd, plain torch and MPS), pipeline_bench.py
#               (issue 18: pipelined chains and matmuls against synchronous calls and torch), with
#               gpukitd_socket.py, which they import
#     lib/      every shared library they need except glibc's own and the NVIDIA driver's
#               (libcuda always comes from the host's driver); libstdc++ and libgcc_s ship
#     python/   gpukit/: the Python package with its compiled module _gpukit for Python 3.12
#               (and for the build tree's own Python where it built one); lib/: links to
#               lib/'s libraries less those a host's Python loads itself (libstdc++, libgcc_s,
#               zlib, OpenSSL), which is what the module loads (see "Python package" below);
#               bin/gpukit-bench runs its benchmark tool gpukit.bench (issue 18)
#     tests/python/  the Python client's test suite (run-gpu-tests.sh runs it)
#     etc/      gpukitd.json, the example configuration; kubernetes/: deploy/kubernetes/ (the
#               DaemonSet of gpukitd and gpukit-device-plugin, an example pod, the Dockerfile)
#     env.sh    `source` it to put bin/ on PATH and python/ on PYTHONPATH (and, for a build
#               whose programs carry no RPATH, the libraries on LD_LIBRARY_PATH)
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
#   BUNDLE_PYTHON  1 adds python/ and tests/python (default: 1 when a Python 3.12 is found,
#              else 0); 0 leaves them out
#   PYTHON312  the Python 3.12 the module is built for (default: the newest
#              $PYENV_ROOT/versions/3.12*/bin/python3, PYENV_ROOT defaulting to ~/.pyenv, else
#              python3.12 on PATH). It needs its headers, not pybind11 (Debian's serves).
#   PY312_BUILD_DIR  where that module is built, target _gpukit only, with the bundle's RPATH
#              (default: BUILD_DIR-py312; configured, or reconfigured, and built incrementally
#              by every run, with BUILD_DIR's build type and GPUKIT_WERROR)
#
# gpukit dlopens NVRTC and cuBLASLt, so ldd does not see them, and they are large: by default
# the bundle carries neither and gpukit finds them on the host (CUDA toolkit, or PyTorch's
# nvidia-* wheels under site-packages/nvidia/*/lib; see runtime/jit/library_search.h, which
# searches the bundle's lib/ first). Without cuBLASLt, matmul runs on gpukit's own kernel.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIST_DIR="${DIST_DIR:-$ROOT/dist}"
mkdir -p "$DIST_DIR" && DIST_DIR="$(cd "$DIST_DIR" && pwd)"  # absolute: ldd answers in absolute paths
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
  . "$ROOT/deploy/cuda-env.sh"  # the CUDA headers and nvcc (deploy/install-deps.sh)
  log "configuring $BUILD_DIR (RPATH \$ORIGIN/../lib)"
  # DT_RPATH (--disable-new-dtags), unlike DT_RUNPATH, also serves the libraries' own
  # dependencies (libgrpc++ -> libgrpc -> libabsl_*), so lib/ is found for all of them. The
  # Python module (a MODULE library) gets the same: from python/gpukit/, $ORIGIN/../lib is
  # python/lib.
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
    -DCMAKE_BUILD_RPATH='$ORIGIN/../lib' \
    -DCMAKE_EXE_LINKER_FLAGS='-Wl,--disable-new-dtags' \
    -DCMAKE_MODULE_LINKER_FLAGS='-Wl,--disable-new-dtags' \
    "${GPUKIT_CUDA_CMAKE_ARGS[@]}" >/dev/null
  log "building (-j $JOBS)"
  cmake --build "$BUILD_DIR" -j "$JOBS"
fi
[ -f "$BUILD_DIR/CMakeCache.txt" ] || die "$BUILD_DIR is not a CMake build tree"
# A test build's fault-injection ops can crash an executor on a client's request.
if grep -q '^GPUKIT_FAULT_INJECTION:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" &&
   [ "${ALLOW_FAULT_INJECTION:-0}" != "1" ]; then
  die "$BUILD_DIR is a test build (GPUKIT_FAULT_INJECTION=ON); bundle a release build, or set ALLOW_FAULT_INJECTION=1 for a bundle that runs tests only"
fi

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
for required in gpukitd gpukit-compile-worker gpukit-executor gpukitctl gpukit-device-plugin; do
  [ -f "$BUNDLE/bin/$required" ] || die "$BUILD_DIR has no $required: build it first"
done
log "bin/: $count executables"

# ---- Python package: python/gpukit, its module for Python 3.12 (and the build tree's) ----
# The module (_gpukit.cpython-3XY-*.so) links libgpukit's libraries (gRPC, abseil, ...) and
# finds them through DT_RPATH $ORIGIN/../lib, i.e. python/lib, so importing gpukit needs no
# LD_LIBRARY_PATH. python/lib links every library of lib/ except those that the host's Python
# and its extensions load themselves: the C++ runtime (libstdc++, libgcc_s), zlib and OpenSSL
# (libz, libssl, libcrypto), which every glibc 2.36 host has. One process holds one copy of a
# library, loaded by whichever object asks first, and the Python that imports gpukit also
# imports torch, which needs the host's C++ runtime: Ubuntu 24.04's is GCC 14's, newer than
# the build's GCC 12. Were the bundle's libstdc++ on the module's path, `import gpukit` then
# `import torch` would fail ("GLIBCXX_3.4.32 not found"); with none there, gpukit and torch
# both get the host's, in either order, and gpukit needs no more than GCC 12's runtime has,
# which a newer one has too. zlib and OpenSSL likewise: the host's _ssl, _hashlib and zlib
# modules may need their newer symbol versions. (The bundle's programs, each a process of its
# own, keep the bundle's copies.) The module is built for Python 3.12 in a build tree of its
# own, as one build serves one interpreter.
find_python312() {
  local candidate
  candidate="$( (ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3 2>/dev/null || true) |
               sort -V | tail -n 1)"
  [ -n "$candidate" ] || candidate="$(command -v python3.12 || true)"
  echo "$candidate"
}
PYTHON312="${PYTHON312:-$(find_python312)}"
if [ -z "${BUNDLE_PYTHON:-}" ]; then
  BUNDLE_PYTHON=0
  if [ -n "$PYTHON312" ]; then
    BUNDLE_PYTHON=1
  else
    log "python/: no Python 3.12 found (PYTHON312=...); no Python package"
  fi
fi
has_bundle_rpath() {  # DT_RPATH (not RUNPATH) $ORIGIN/../lib
  readelf -d "$1" | grep -F '(RPATH)' | grep -qF '$ORIGIN/../lib'
}
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD_DIR/CMakeCache.txt"; }
MODULES_WITHOUT_RPATH=()
if [ "$BUNDLE_PYTHON" = "1" ]; then
  [ -n "$PYTHON312" ] || die "BUNDLE_PYTHON=1 but no Python 3.12 found: set PYTHON312"
  "$PYTHON312" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' ||
    die "PYTHON312=$PYTHON312 is not Python 3.12"
  PY312_BUILD_DIR="${PY312_BUILD_DIR:-$BUILD_DIR-py312}"
  log "python/: building the module for $PYTHON312 in $PY312_BUILD_DIR (RPATH \$ORIGIN/../lib)"
  cuda_include="$(cache_value GPUKIT_CUDA_INCLUDE_DIR)"
  cmake -S "$ROOT" -B "$PY312_BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE="$(cache_value CMAKE_BUILD_TYPE)" \
    -DGPUKIT_WERROR="$(cache_value GPUKIT_WERROR)" \
    ${cuda_include:+-DGPUKIT_CUDA_INCLUDE_DIR="$cuda_include"} \
    -DGPUKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PYTHON312" \
    -DGPUKIT_BUILD_TESTS=OFF -DGPUKIT_BUILD_BENCHMARKS=OFF \
    -DCMAKE_BUILD_RPATH='$ORIGIN/../lib' \
    -DCMAKE_MODULE_LINKER_FLAGS='-Wl,--disable-new-dtags' >/dev/null
  cmake --build "$PY312_BUILD_DIR" -j "$JOBS" --target _gpukit
  mkdir -p "$BUNDLE/python/gpukit" "$BUNDLE/tests/python"
  cp "$ROOT"/client/python/gpukit/*.py "$ROOT"/client/python/gpukit/*.pyi \
    "$ROOT/client/python/gpukit/py.typed" "$BUNDLE/python/gpukit/"
  mapfile -t MODULES < <(ls "$PY312_BUILD_DIR"/python/gpukit/_gpukit.cpython-312-*.so \
                            "$BUILD_DIR"/python/gpukit/_gpukit.*.so 2>/dev/null)
  for module in "${MODULES[@]}"; do
    name="$(basename "$module")"
    [ -e "$BUNDLE/python/gpukit/$name" ] && continue  # 3.12's from PY312_BUILD_DIR comes first
    cp "$module" "$BUNDLE/python/gpukit/$name"
    if ! has_bundle_rpath "$module"; then MODULES_WITHOUT_RPATH+=("$name"); fi
  done
  ls "$BUNDLE"/python/gpukit/_gpukit.cpython-312-*.so >/dev/null 2>&1 ||
    die "$PY312_BUILD_DIR built no module for Python 3.12"
  has_bundle_rpath "$BUNDLE"/python/gpukit/_gpukit.cpython-312-*.so ||
    die "the Python 3.12 module has no DT_RPATH \$ORIGIN/../lib"
  log "python/gpukit: $(cd "$BUNDLE/python/gpukit" && ls _gpukit*.so | tr '\n' ' ')"
  for name in "${MODULES_WITHOUT_RPATH[@]}"; do
    log "note: python/gpukit/$name carries no RPATH to python/lib (BUILD_DIR was not configured by bundle.sh): it imports with LD_LIBRARY_PATH=<bundle>/python/lib, as env.sh sets"
  done
  cp "$ROOT"/tests/python/*.py "$BUNDLE/tests/python/"
fi

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
ELF_FILES=("$BUNDLE"/bin/*)
if [ "$BUNDLE_PYTHON" = "1" ]; then ELF_FILES+=("$BUNDLE"/python/gpukit/_gpukit*.so); fi
for program in "${ELF_FILES[@]}"; do
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

# python/lib: what the module loads from the bundle (see "Python package" above).
is_python_host_library() {
  case "$1" in
    libstdc++.so.* | libgcc_s.so.* | libz.so.* | libssl.so.* | libcrypto.so.*) return 0 ;;
  esac
  return 1
}
if [ "$BUNDLE_PYTHON" = "1" ]; then
  mkdir -p "$BUNDLE/python/lib"
  for soname in "${!SHIPPED[@]}"; do
    is_python_host_library "$soname" || ln -s "../../lib/$soname" "$BUNDLE/python/lib/$soname"
  done
  # Check it as the loader sees it: every library of the bundle that the 3.12 module needs
  # comes from python/lib, and the host's own (C++ runtime, zlib, OpenSSL) from the system.
  for module in "$BUNDLE"/python/gpukit/_gpukit.cpython-312-*.so; do
    while read -r soname _ path _; do
      [ -n "${SHIPPED[$soname]:-}" ] || continue
      [ -n "$path" ] && path="$(realpath -sm "$path")"  # ldd says python/gpukit/../lib/...
      if is_python_host_library "$soname"; then
        case "$path" in
          "$BUNDLE"/*) die "$(basename "$module") loads $soname from the bundle" ;;
        esac
      else
        case "$path" in "$BUNDLE/python/lib/$soname") ;; *)
          die "$(basename "$module") finds $soname at ${path:-nowhere}, not in python/lib" ;;
        esac
      fi
    done < <(env -u LD_LIBRARY_PATH ldd "$module")
  done
  log "python/lib: $(ls "$BUNDLE/python/lib" | wc -l) links (lib/ less C++ runtime, zlib, OpenSSL)"
fi

if [ "$STRIP" = "1" ]; then
  log "stripping debug info from the bundled copies"
  chmod u+w "${ELF_FILES[@]}" "$BUNDLE"/lib/*
  strip --strip-debug "${ELF_FILES[@]}" "$BUNDLE"/lib/* 2>/dev/null || true
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
PROGRAMS_HAVE_RPATH=0
if readelf -d "$BUNDLE/bin/gpukitd" | grep -E '\((RPATH|RUNPATH)\)' | grep -qF '$ORIGIN/../lib'; then
  PROGRAMS_HAVE_RPATH=1
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
    gpu_warm_start_test) needs=(gpukitd) ;;
    *) needs=() ;;
  esac
  for program in "${needs[@]}"; do
    [ -f "$BUNDLE/bin/$program" ] || die "gpu test $test needs $program in bin/: build it first"
  done
done

# The runner, with this bundle's list of GPU test binaries.
sed "s|^TESTS=(@GPU_TESTS@)\$|TESTS=(${GPU_TESTS[*]})|" "$ROOT/deploy/run-gpu-tests.sh" \
  >"$BUNDLE/bin/run-gpu-tests.sh"
if grep -q '@GPU_TESTS@' "$BUNDLE/bin/run-gpu-tests.sh"; then
  die "deploy/run-gpu-tests.sh has no TESTS line to fill"
fi
chmod +x "$BUNDLE/bin/run-gpu-tests.sh"
if [ "$BUNDLE_PYTHON" = "1" ]; then
  install -m 0755 "$ROOT/tests/bench/python_overhead_bench.py" "$BUNDLE/bin/"
  install -m 0755 "$ROOT/tests/bench/executor_overhead_bench.py" "$BUNDLE/bin/"
  install -m 0755 "$ROOT/tests/bench/qos_isolation_bench.py" "$BUNDLE/bin/"
  install -m 0755 "$ROOT/tests/bench/partition_share_bench.py" "$BUNDLE/bin/"
  install -m 0755 "$ROOT/tests/bench/pipeline_bench.py" "$BUNDLE/bin/"
  # What they share (waiting for the gpukitd they start); they import it from beside themselves.
  install -m 0644 "$ROOT/tests/bench/gpukitd_socket.py" "$BUNDLE/bin/"
  # gpukit-bench, as pip's console script of the package would be: the bundle's python/
  # first on the path, so it runs from bin/ with or without env.sh.
  cat >"$BUNDLE/bin/gpukit-bench" <<'EOF'
#!/bin/sh
# gpukit-bench (the gpukit package's gpukit.bench) with this bundle's python/ package.
# PYTHON picks the interpreter (default python3; the module is built for Python 3.12).
bundle_python="$(cd "$(dirname "$0")/../python" && pwd)"
export PYTHONPATH="$bundle_python${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -m gpukit.bench "$@"
EOF
  chmod 0755 "$BUNDLE/bin/gpukit-bench"
fi

# ---- Configuration, environment, README ----
cp "$ROOT/deploy/gpukitd.json" "$BUNDLE/etc/gpukitd.json"
mkdir -p "$BUNDLE/etc/kubernetes"
cp "$ROOT"/deploy/kubernetes/* "$BUNDLE/etc/kubernetes/"
{
  cat <<'EOF'
# Source this file (`. gpukit-*/env.sh`) to run the bundle's programs, and to import its
# Python package, from any directory.
GPUKIT_BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"
export PATH="$GPUKIT_BUNDLE/bin:$PATH"
EOF
  if [ "$BUNDLE_PYTHON" = "1" ]; then
    cat <<'EOF'
# The package finds the bundle's libraries by itself (RPATH to python/lib).
export PYTHONPATH="$GPUKIT_BUNDLE/python${PYTHONPATH:+:$PYTHONPATH}"
EOF
  fi
  if [ "$BUNDLE_PYTHON" = "1" ] &&
     { [ "$PROGRAMS_HAVE_RPATH" = "0" ] || [ ${#MODULES_WITHOUT_RPATH[@]} -gt 0 ]; }; then
    cat <<'EOF'
# This build's programs, or a Python module of it, carry no RPATH to the bundle's libraries,
# so the loader path names them: python/lib, which is lib/ less libstdc++, libgcc_s, zlib and
# OpenSSL. A Python that imports torch in this shell needs the host's C++ runtime, newer than
# the bundle's, and a process holds one; programs without an RPATH run with the host's too
# (on a host whose libstdc++ is older than GCC 12's, run them, not Python, with
# LD_LIBRARY_PATH="$GPUKIT_BUNDLE/lib", as run-gpu-tests.sh does).
export LD_LIBRARY_PATH="$GPUKIT_BUNDLE/python/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
EOF
  elif [ "$PROGRAMS_HAVE_RPATH" = "1" ]; then
    cat <<'EOF'
# No LD_LIBRARY_PATH: the programs find lib/ through their RPATH, and a Python that imports
# torch here must not see lib/'s libstdc++, older than the host's that torch needs.
EOF
  else
    cat <<'EOF'
# This build's programs carry no RPATH to lib/: the loader path names it.
export LD_LIBRARY_PATH="$GPUKIT_BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
EOF
  fi
} >"$BUNDLE/env.sh"
PYTHON_NOTE=""
if [ "$BUNDLE_PYTHON" = "1" ]; then
  versions="$(cd "$BUNDLE/python/gpukit" && ls _gpukit*.so |
              sed 's/^_gpukit\.cpython-\([0-9]\)\([0-9]*\)-.*/\1.\2/' | paste -sd ' ')"
  PYTHON_NOTE="
## Python

\`python/gpukit\` is the \`gpukit\` package with its compiled module for Python ${versions// /, }
(\`_gpukit.cpython-3XY-*.so\`); it needs NumPy on the host.

- \`. ./env.sh\` puts \`python/\` on PYTHONPATH (or set \`PYTHONPATH=<bundle>/python\`):
  \`python3 -c 'import gpukit'\`. The module finds the bundle's libraries through its RPATH
  (\`python/lib\`: links to \`lib/\` less libstdc++, libgcc_s, zlib and OpenSSL, which come
  from the host), so \`import torch\` and \`import gpukit\` work in either order with the
  host's C++ runtime. Do not put \`lib/\` on LD_LIBRARY_PATH for a Python that imports
  torch: its libstdc++ is the build's, older.
- The Python suite on the GPU: \`bin/run-gpu-tests.sh -R python_tests\` (part of a plain
  \`bin/run-gpu-tests.sh\`), or \`. ./env.sh && GPUKIT_TEST_BACKEND=cuda python3 -m pytest
  tests/python\` (the suite finds \`python/\` and \`bin/gpukitd\` by itself). Needs pytest.
- Python's \`c = a + b\` against the C++ client's: \`. ./env.sh &&
  bin/python_overhead_bench.py --backend cuda\` on a GPU host (\`--help\` says more).
- The benchmark suite (ping, RunOp, pipelined chain, matmul against torch, elementwise,
  transfers): \`. ./env.sh && gpukit-bench --gpukitd bin/gpukitd --save run.json\`, or
  against a running gpukitd \`gpukit-bench --address unix:///path.sock\`; \`--compare
  old.json --fail-on-regression\` compares two runs (\`--help\` says more).
- QoS isolation (a victim beside a matmul flood: gpukitd, plain torch, MPS; needs torch
  for scenarios 4-6, about 7 minutes): \`. ./env.sh && bin/qos_isolation_bench.py --save
  qos.json\` on a GPU host (\`--help\` says more)."
  for name in "${MODULES_WITHOUT_RPATH[@]}"; do
    PYTHON_NOTE="$PYTHON_NOTE
- \`python/gpukit/$name\` carries no RPATH: it imports with
  \`LD_LIBRARY_PATH=<bundle>/python/lib\` (env.sh sets it for this build)."
  done
fi
cat >"$BUNDLE/README.md" <<EOF
# $NAME

A relocatable gpukit build (made by deploy/bundle.sh from $(basename "$BUILD_DIR")/ on
$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" || uname -s)). It needs glibc 2.36 or newer
and, for the CUDA backend, an NVIDIA driver for CUDA 12.0 or newer (libcuda.so.1 comes from the
driver; nothing here replaces it).

- GPU tests, as \`ctest -L gpu\` runs them: \`bin/run-gpu-tests.sh\` (see its header for -R and
  gtest flags).
- Kubernetes: etc/kubernetes/ (an image of this bundle, a DaemonSet of gpukitd and
  bin/gpukit-device-plugin, an example pod; docs/operations.md, "Kubernetes").
- Anything else: \`. ./env.sh\` first, then e.g. \`gpukitd --config etc/gpukitd.json\`,
  \`gpukitctl status\`, \`runtime_test\`.
- $RPATH_NOTE
- The integration tests (integration_*_test) run from the build tree only: some look for
  gpukitctl and their worker at their paths there. The GPU tests that start gpukitd and
  workers (gpu_multi_client_test) find them here in bin/.
$PYTHON_NOTE
EOF

# ---- Archive ----
log "archiving $BUNDLE.tar.gz"
tar -C "$DIST_DIR" -czf "$BUNDLE.tar.gz" "$NAME"
log "done: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1)), $BUNDLE.tar.gz ($(du -sh "$BUNDLE.tar.gz" | cut -f1))"
