#!/usr/bin/env bash
# Checks that a built libweave.so exports weave's public API and nothing else (issue 13: exported
# std:: template instantiations were bound process-wide and broke torch/numpy processes).
#   bash scripts/check_exports.sh build/src/libweave.so
# Fails when: a dynamic symbol defined in the library is not weave:: (std::, cudart, ...); an
# internal namespace (weave::gemm::, weave::comm::, ...) is exported; the library defines libstdc++
# locale facet ids without carrying libstdc++'s locale runtime with them (ids that index another
# runtime's facet tables break every stream); a public header does not open its namespace with
# WEAVE_API (its functions would not be exported).
# A toolchain that links libstdc++ statically (as the GPU machines' /opt/gcc does) puts a private
# copy of the runtime into libweave.so; that is fine once all of it is local, and is reported.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=${1:-build/src/libweave.so}
[ -f "$lib" ] || { echo "check_exports: $lib not found" >&2; exit 1; }
fail=0
names=$(nm -DC --defined-only "$lib" | sed -E 's/^[0-9a-f]+ [A-Za-z] //')
foreign=$(grep -vE '^(weave::|typeinfo for weave::|typeinfo name for weave::|vtable for weave::)' <<<"$names" || true)
if [ -n "$foreign" ]; then
  echo "check_exports: $lib exports $(wc -l <<<"$foreign") symbol(s) outside weave's API:" >&2
  head -20 <<<"$foreign" >&2; fail=1
fi
internal=$(grep -E '^(typeinfo (name )?for |vtable for )?weave::(gemm|gemv|comm|detail|hopper|ptx|env|log|bench|cli|test|ref::detail)::' <<<"$names" || true)
if [ -n "$internal" ]; then
  echo "check_exports: $lib exports internal symbols:" >&2; head -20 <<<"$internal" >&2; fail=1
fi
symtab=$(nm -C "$lib" 2>/dev/null || true)
if [ -z "$symtab" ]; then
  echo "check_exports: note: $lib is stripped; the libstdc++ runtime check needs an unstripped build"
elif grep -q ' std::locale::_S_twinned_facets$' <<<"$symtab"; then
  echo "check_exports: note: libstdc++ is linked statically into $lib (a private runtime; none of it exported)"
else
  ids=$(grep -E ' std::.*::id$' <<<"$symtab" || true)
  if [ -n "$ids" ]; then
    echo "check_exports: $lib defines libstdc++ locale facet ids without libstdc++'s locale runtime:" >&2
    head <<<"$ids" >&2; fail=1
  fi
fi
for h in include/weave/*.hpp; do
  [ "$(basename "$h")" = export.hpp ] && continue
  grep -q '^namespace weave' "$h" || continue  # declares nothing (the umbrella weave.hpp)
  grep -q '^namespace weave WEAVE_API {' "$h" || { echo "check_exports: $h does not open 'namespace weave WEAVE_API {'" >&2; fail=1; }
done
[ $fail -eq 0 ] && echo "check_exports: $lib exports $(wc -l <<<"$names") symbols, all weave's public API; no std:: definitions"
exit $fail
