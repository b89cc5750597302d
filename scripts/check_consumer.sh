#!/usr/bin/env bash
# weave as a dependency of another C++ project, the way README "Using weave from C++" describes it:
#   1. `cmake --install` into a prefix, then move the prefix (the package must be relocatable);
#   2. the package's promises (tests/consumer: version rules, targets, soname, NCCL_ROOT);
#   3. examples/ built against the moved prefix and run (CPU part: plan and validate; the GPU
#      part where Hopper GPUs are visible, otherwise each says why it skipped it and exits 77);
#   4. the examples without CMake (the README's pkg-config line, nothing added: the program must
#      start), against the build tree (weave_DIR) and through add_subdirectory.
# Usage: bash scripts/check_consumer.sh [build folder, default build]. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
work=$build/consumer
rm -rf "$work"
mkdir -p "$work"
cfg() { cmake -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >"$work/last.log" 2>&1 || { cat "$work/last.log"; return 1; }; }
say() { echo "consumer: $*"; }

version=$(sed -n 's/^#define WEAVE_VERSION_STRING "\(.*\)"$/\1/p' include/weave/version.hpp)
major_minor=${version%.*}

# 1. install, then move the prefix
cmake --install "$build" --prefix "$work/prefix-installed" >/dev/null
mv "$work/prefix-installed" "$work/prefix"
prefix=$(cd "$work/prefix" && pwd)
for f in lib/libweave.so "lib/libweave.so.$major_minor" "lib/libweave.so.$version" bin/weave include/weave/weave.hpp \
         lib/cmake/weave/weaveConfig.cmake lib/cmake/weave/weaveConfigVersion.cmake lib/pkgconfig/weave.pc; do
  [ -e "$prefix/$f" ] || { echo "consumer: the install lacks $f" >&2; exit 1; }
done
soname=$(objdump -p "$prefix/lib/libweave.so.$version" | awk '$1 == "SONAME" {print $2}')
[ "$soname" = "libweave.so.$major_minor" ] || { echo "consumer: soname '$soname', expected libweave.so.$major_minor" >&2; exit 1; }
"$prefix/bin/weave" --version | grep -qx "weave $version"
"$prefix/bin/weave" plan gemm -m 4096 -n 5120 -k 2048 --quant blockscale | grep -q '^plan: '
say "installed and moved: $(cd "$prefix" && find . -type f -o -type l | wc -l) files, soname $soname, bin/weave runs from the moved prefix"

# 2. the package's promises
check() { cfg -S tests/consumer -B "$work/check" "$@" && grep 'weave package check' "$work/last.log" | sed 's/^-- /consumer: /'; rm -rf "$work/check"; }
check -DCMAKE_PREFIX_PATH="$prefix" -DWEAVE_REQUEST="$major_minor" -DEXPECT_FOUND=ON -DEXPECT_PREFIX="$prefix"
check -DCMAKE_PREFIX_PATH="$prefix" -DWEAVE_REQUEST="$version" -DEXPECT_FOUND=ON -DEXPECT_PREFIX="$prefix"
check -DCMAKE_PREFIX_PATH="$prefix" -DWEAVE_REQUEST="${version%%.*}.$(( ${major_minor#*.} + 1 ))" -DEXPECT_FOUND=OFF
check -DCMAKE_PREFIX_PATH="$prefix" -DWEAVE_REQUEST="$(( ${version%%.*} + 1 )).0" -DEXPECT_FOUND=OFF
check -DCMAKE_PREFIX_PATH="$prefix" -DWEAVE_REQUEST="$major_minor" -DEXPECT_FOUND=OFF -DNCCL_ROOT="$work/no-nccl-here" \
      -DEXPECT_MESSAGE="NCCL not found.*NCCL_ROOT"
nccl_root=$(dirname "$(sed -n 's/^NCCL_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt")")
check -DCMAKE_PREFIX_PATH="$prefix" -DWEAVE_REQUEST="$major_minor" -DEXPECT_FOUND=ON -DNCCL_ROOT="$nccl_root"
check -Dweave_DIR="$(cd "$build" && pwd)" -DWEAVE_REQUEST="$major_minor" -DEXPECT_FOUND=ON

# 3. the examples against the moved prefix, run
# An example passes with exit 0 (ran, every result matched) or 77 with its "GPU part skipped"
# sentence (no GPUs to run on); anything else, a loader error (127) included, fails.
example_ok() {  # $1: exit status, $2: output
  [ "$1" -eq 0 ] || { [ "$1" -eq 77 ] && grep -q '^GPU part skipped: ' <<<"$2"; }
}
run_one() {  # $1: program; prints its output; fails unless example_ok
  local out st=0
  out=$("$1" 2>&1) || st=$?
  echo "consumer: \$ $(basename "$1")  (exit $st)"
  echo "$out" | sed 's/^/consumer:   /'
  example_ok "$st" "$out"
}
run_examples() {  # $1: build folder of the examples
  local ex fails=0
  for ex in gemm collective_threads collective_processes fused_ops; do
    run_one "$1/$ex" || fails=$((fails + 1))
  done
  [ "$fails" -eq 0 ] || { echo "consumer: $fails example(s) FAILED" >&2; return 1; }
}
cfg -S examples -B "$work/examples" -DCMAKE_PREFIX_PATH="$prefix"
cmake --build "$work/examples" >/dev/null
say "examples built against $prefix"
run_examples "$work/examples"

# 3b. without CMake: pkg-config
if command -v pkg-config >/dev/null; then
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs weave)
  g++ examples/gemm.cpp -o "$work/gemm-pkgconfig" $flags
  run_one "$work/gemm-pkgconfig"
  say "examples/gemm.cpp built with pkg-config (weave $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --modversion weave)) and run"
else
  say "pkg-config is not installed: the pkg-config check SKIPPED"
fi

# 4. the build tree's package and add_subdirectory (same target name, weave::weave; the tools and
#    tests are off by default below another project)
cfg -S examples -B "$work/examples-buildtree" -Dweave_DIR="$(cd "$build" && pwd)"
cmake --build "$work/examples-buildtree" >/dev/null
run_one "$work/examples-buildtree/gemm"
say "examples built against the build tree ($build) and run"
cfg -S examples -B "$work/examples-subdir" -DWEAVE_EXAMPLES_SOURCE="$(pwd)"
cmake --build "$work/examples-subdir" >/dev/null
run_one "$work/examples-subdir/gemm"
say "examples built with add_subdirectory(weave) and run"
