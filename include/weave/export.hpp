// WEAVE_API marks what libweave.so exports: every public header opens its namespace as
// `namespace weave WEAVE_API {`, so the declarations in include/weave/ (and nothing else) keep
// default visibility while the library compiles with -fvisibility=hidden. A new public header
// must do the same, or its functions stay unexported (scripts/check_exports.sh checks both).
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define WEAVE_API __attribute__((visibility("default")))
#else
#define WEAVE_API
#endif
