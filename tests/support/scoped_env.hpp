// Test support: sets an environment variable for one scope (unset again at its end), e.g. a
// WEAVE_*_DEBUG knob that a constructor reads.
#pragma once
#include <cstdlib>

namespace weave::test {

struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

}  // namespace weave::test
