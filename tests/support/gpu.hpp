// Test support: skip (never pass) GPU tests on machines without enough Hopper GPUs, with the
// reason in the output.
#pragma once
#include <gtest/gtest.h>

#include <string>

namespace weave::test {
// "" when at least `min_gpus` sm_90 devices are visible; otherwise why not.
std::string gpu_skip_reason(int min_gpus);
int hopper_gpu_count();
}  // namespace weave::test

#define WEAVE_REQUIRE_GPUS(n)                                                     \
  do {                                                                            \
    const std::string weave_skip_ = ::weave::test::gpu_skip_reason(n);            \
    if (!weave_skip_.empty()) GTEST_SKIP() << weave_skip_;                        \
  } while (0)
