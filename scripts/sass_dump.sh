#!/usr/bin/env bash
# Writes the SASS of every GEMM kernel instance of a build, one file per instance, so two builds can
# be compared instruction for instruction (a behaviour-neutral kernel refactor must leave every file
# identical). Needs cuobjdump and nvdisasm (the CUDA toolkit, or their PyPI packages); no GPU.
#   bash scripts/sass_dump.sh BUILD_DIR OUT_DIR [all]   then: diff -r OUT_A OUT_B
# all: every CUDA object of the library (the comm kernels, the fused tail, the GEMV, ...) as well.
set -euo pipefail
export PATH=/usr/local/cuda/bin:$PATH
build=${1:?usage: sass_dump.sh BUILD_DIR OUT_DIR}
out=${2:?usage: sass_dump.sh BUILD_DIR OUT_DIR [all]}
which=${3:-instances}
for t in cuobjdump nvdisasm; do
  command -v $t >/dev/null || { echo "sass_dump: $t not found (CUDA toolkit bin/, or PyPI nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm)" >&2; exit 2; }
done
mkdir -p "$out"
n=0
while IFS= read -r obj; do
  stem=$(basename "$obj" .cu.o)
  [ "$which" = all ] && stem=$(echo "${obj#*weave_objects.dir/}" | sed 's|/|__|g; s|\.cu\.o$||')
  # Only the instructions: the header names the object's path, which differs between build folders.
  # and anonymous-namespace names carry a hash of the file's path: normalised. Addresses have 4 hex
  # digits or more (a {4} pattern silently dropped every instruction past 64 KB of code).
  cuobjdump -sass "$obj" | grep -E '^\s+/\*[0-9a-f]{4,}\*/|Function :' |
    sed -E 's/[0-9]+_GLOBAL__N__[0-9a-f]+_[0-9]+_[A-Za-z0-9_]+_cu_[0-9a-f]+/_GLOBAL__N__ANON/g' > "$out/$stem.sass"
  [ -s "$out/$stem.sass" ] || { echo "sass_dump: no instructions read from $obj" >&2; exit 1; }
  n=$((n + 1))
done < <(if [ "$which" = all ]; then find "$build/src" -path '*weave_objects.dir*' -name '*.cu.o'; else
           find "$build/src" -path '*gemm_instances*' -name '*.cu.o'; fi | sort)
[ "$n" -gt 0 ] || { echo "sass_dump: no GEMM instance objects under $build" >&2; exit 1; }
echo "sass_dump: $n instances -> $out"
