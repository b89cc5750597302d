#!/usr/bin/env bash
# Checks that a built libweave.so exports weave's public API and nothing else (issue 13: exported
# std:: template instantiations were bound process-wide and broke torch/numpy processes).
#   bash scripts/check_exports.sh build/src/libweave.so
# Fails when: a dynamic symbol defined in the library is not weave:: (std::, cudart, ...); an
# internal namespace (weave::gemm::, weave::comm::, ...) is exported; the library holds its own
# copy of a libstdc++ locale facet id (a private copy would break locale lookups even when hidden);
# a public header does not open its namespace with WEAVE_API (its functions would not be exported).
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
ids=$(nm -C "$lib" | grep -E ' std::.*::id$' || true)
if [ -n "$ids" ]; then
  echo "check_exports: $lib defines its own libstdc++ locale facet ids:" >&2; head <<<"$ids" >&2; fail=1
fi
for h in include/weave/*.hpp; do
  [ "$(basename "$h")" = export.hpp ] && continue
  grep -q '^namespace weave WEAVE_API {' "$h" || { echo "check_exports: $h does not open 'namespace weave WEAVE_API {'" >&2; fail=1; }
done
[ $fail -eq 0 ] && echo "check_exports: $lib exports $(wc -l <<<"$names") symbols, all weave's public API; no std:: definitions"
exit $fail
