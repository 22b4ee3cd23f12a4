# Sourced by scripts/test and scripts/run: installs what is missing on a
# fresh Debian 12 machine, then configures and builds (incrementally).
set -euo pipefail

ATTN_PACKAGES=(meson ninja-build pkg-config cmake gcc g++ ccache
  libxtensor-dev xtl-dev libxsimd-dev libxtensor-blas-dev libopenblas-dev
  librapidcheck-dev libgtest-dev libbenchmark-dev libboost-dev libmpfr-dev python3-matplotlib
  clang libclang-rt-14-dev python3-numpy python3-markdown chromium chromium-driver python3-selenium
  nlohmann-json3-dev python3-scipy python3-pytest python3-dev python3-venv pybind11-dev slurm-wlm munge)

attn_install_missing() {
  local missing=()
  for p in "${ATTN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The project's Python environment, .venv/ at the checkout's root (git ignores it): Debian's python3 with its
# own packages, every version pinned in python/requirements.txt (PyTorch, NumPy, SciPy, matplotlib, OpenVINO,
# ONNX Runtime, JAX, ...; not Debian's: one PyTorch, the pinned one, in every process). A new checkout's .venv is
# a link to an environment shared by every checkout on this machine with the same pins,
# ${ATTN_VENVS:-~/.cache/attention-lab}/venv-<hash of requirements.txt>, made once (the first install downloads
# about 3 GB, PyTorch's Linux wheel carrying CUDA libraries, and takes minutes; from pip's cache 1 min 31 s,
# measured 2026-12-02) under a lock, so a fresh clone (CI's) installs nothing when the pins are installed. When
# the pins change, the new environment replaces the store's others (6 GB each); a checkout still linked to a
# removed one makes it again. A .venv that is a directory (made by an older setup.sh) stays one and is updated
# in place. A second run installs nothing (a stamp holds requirements.txt's hash).
attn_python_env() {
  local want store shared
  want=$(sha256sum python/requirements.txt | cut -d' ' -f1)
  if [ -x .venv/bin/python3 ] && [ "$(cat .venv/.requirements-sha256 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  if [ -d .venv ] && [ ! -L .venv ]; then  # a checkout's own environment: updated where it is
    echo "installing the Python environment (.venv) from python/requirements.txt"
    .venv/bin/python3 -m pip install --quiet --disable-pip-version-check -r python/requirements.txt
    echo "$want" > .venv/.requirements-sha256
    return 0
  fi
  store="${ATTN_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/attention-lab}"
  shared="$store/venv-${want:0:16}"
  mkdir -p "$store"
  (
    flock 9
    if [ -x "$shared/bin/python3" ] && [ "$(cat "$shared/.requirements-sha256" 2>/dev/null)" = "$want" ]; then
      exit 0
    fi
    echo "installing the Python environment ($shared) from python/requirements.txt"
    rm -rf "$shared"
    /usr/bin/python3 -m venv "$shared"
    "$shared/bin/python3" -m pip install --quiet --disable-pip-version-check -r python/requirements.txt
    echo "$want" > "$shared/.requirements-sha256"
    for old in "$store"/venv-*; do
      [ "$old" = "$shared" ] || rm -rf "$old"
    done
  ) 9>"$store/.lock"
  rm -f .venv
  ln -s "$shared" .venv
}

# Configures build/ once (release, portable: the vector kernels are chosen at
# run time, attn/simd/simd.hpp), then builds what changed.
attn_build() {
  attn_python_env
  if [ ! -f build/build.ninja ]; then
    meson setup build --buildtype=release
  fi
  meson compile -C build
}

# The sanitizer build: AddressSanitizer + UndefinedBehaviorSanitizer, the
# tests scripts/test runs under them (unit, golden but its attn-lab cases,
# agreement, props with 10 cases per property; tests/cpp/meson.build). -O1 -g1
# (line tables: stack traces with file and line): 42 s for streaming.cpp
# against 124 s at -O2 -g, measured; the whole build was 17 minutes at -O2 -g.
# UBSan's alignment and null checks are left out: on every pointer access of the
# xtensor templates they were 60% of the build's compile time (streaming.cpp 50-56
# CPU-s with them, 19-23 without, g++ 12, measured twice each), and what they find
# is found here anyway: a null access faults and AddressSanitizer reports it with
# its stack; a misaligned vector load faults the same way; a misaligned scalar
# access is harmless on x86. Every other UBSan check stays (overflow, shifts,
# bounds, float casts, vptr, object size, pointer overflow, ...).
# (-O1 as -Doptimization=1 -Ddebug=false, not also --buildtype=plain: meson warned that the two override each
# other; the compile commands are the same either way.)
ATTN_ASAN_OPTIONS=(-Db_sanitize=address,undefined -Db_lundef=false -Doptimization=1 -Ddebug=false
                   "-Dcpp_args=-g1 -fno-sanitize=alignment,null")
# Its case budgets: one seed, 10 cases per property, in two processes (set on every run, so a folder set up before an option
# existed gets it too).
ATTN_ASAN_RC=(-Drc_seeds=20261129 -Drc_cases=10 -Drc_shards=2)
attn_build_asan() {
  # A folder an older setup.sh configured (-O2 -g, or every UBSan check) is made anew: `meson configure` would
  # reset the optimization level along with the build type.
  if [ -f build-asan/build.ninja ] && ! grep -q 'fno-sanitize=alignment,null' build-asan/meson-info/intro-buildoptions.json; then
    rm -rf build-asan
  fi
  # Only the vector-kernel variant this CPU runs is compiled beside the baseline (-Dsimd_variants): the tests
  # here run the variant in use and no other (simd_variants forces the others, in build/), so the rest were
  # built and never executed; avx2 and avx512bf16 were 94 of the build's 590 CPU-seconds on an AVX-512 Xeon
  # (.ninja_log of a cold build). Set on every run: the folder may outlive a change of machine.
  local in_use variants="[]"
  in_use=$(build/tools/attn-lab list --json 2>/dev/null |
           python3 -c 'import json, sys; print(json.load(sys.stdin)["simd"]["in_use"])' 2>/dev/null) || in_use=""
  case "$in_use" in
    baseline) ;;
    avx2|avx512|avx512bf16|avx512amx) variants="['$in_use']" ;;
    *) variants="['avx2', 'avx512', 'avx512bf16', 'avx512amx']" ;;  # no main build to ask: every variant
  esac
  if [ ! -f build-asan/build.ninja ]; then
    meson setup build-asan "${ATTN_ASAN_OPTIONS[@]}" "${ATTN_ASAN_RC[@]}" "-Dsimd_variants=$variants"
  else  # (--reconfigure reads meson_options.txt again: `meson configure` refuses an option added since)
    meson setup --reconfigure build-asan "${ATTN_ASAN_RC[@]}" "-Dsimd_variants=$variants"
  fi
  meson compile -C build-asan tests/cpp/unit_test tests/cpp/golden_test tests/cpp/agreement_test tests/cpp/props
}

# The ThreadSanitizer build: the workers' test alone (tests/cpp/threads_test.cpp: every
# backend with threads of its own, forward and backward, 2 and 3 workers), -O1 -g1.
# In a fresh clone's scripts/test (cold ccache, 2 cores): the stage 1:13, its compiles spanning 69 s, 1.1 s of run.
attn_build_tsan() {
  if [ ! -f build-tsan/build.ninja ]; then
    meson setup build-tsan -Db_sanitize=thread -Doptimization=1 -Ddebug=false -Dcpp_args=-g1
  fi
  meson compile -C build-tsan tests/cpp/threads_test
}

# The libFuzzer targets: a clang build directory of the fuzz targets only.
attn_build_fuzz() {
  if [ ! -f build-fuzz/build.ninja ]; then
    CXX=clang++ meson setup build-fuzz -Dfuzz=true --buildtype=debugoptimized
  fi
  meson compile -C build-fuzz
}

attn_install_missing
attn_build
