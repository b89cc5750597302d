// The GEMM main loop's debug knobs (gemm::MainloopDebug::from_env, read by weave::Gemm at
// construction): off by default, each value checked and refused naming its variable before any
// GPU work. (That the knobs reach the kernel is the GPU test GemmWaitTimeout.GemmKernelAbortsCooperatively.)
//
// Catches: a knob on by default (a production GEMM that stalls or drops a wait), an out-of-range or
// non-integer value accepted (a negative K block would never stall, a huge bound never fire), and
// a message that does not name the variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "gemm/operands.hpp"
#include "gemv/gemv.hpp"
#include "weave/error.hpp"

namespace weave {
namespace {

struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name); }
};

std::string refusal(const char* name, const char* value) {
  ScopedEnv e(name, value);
  try {
    gemm::MainloopDebug::from_env();
  } catch (const Error& err) {
    EXPECT_EQ(err.status(), Status::kInvalidArgument) << err.what();
    return err.what();
  }
  return "";
}

TEST(GemmDebugKnobs, OffByDefault) {
  unsetenv("WEAVE_GEMM_DEBUG_DROP_WAIT");
  unsetenv("WEAVE_GEMM_DEBUG_STALL_K_BLOCK");
  unsetenv("WEAVE_GEMM_DEBUG_PIPELINE_TIMEOUT_MS");
  const gemm::MainloopDebug d = gemm::MainloopDebug::from_env();
  EXPECT_FALSE(d.drop_full_wait);
  EXPECT_EQ(d.stall_k_block, -1);
  EXPECT_EQ(d.pipeline_timeout_ns, 0u);
  const gemm::MainloopDebug none{};
  EXPECT_FALSE(none.drop_full_wait);
  EXPECT_EQ(none.stall_k_block, -1);
  EXPECT_EQ(none.pipeline_timeout_ns, 0u);
}

TEST(GemmDebugKnobs, ValuesAreReadAndChecked) {
  {
    ScopedEnv a("WEAVE_GEMM_DEBUG_STALL_K_BLOCK", "3");
    ScopedEnv b("WEAVE_GEMM_DEBUG_PIPELINE_TIMEOUT_MS", "250");
    const gemm::MainloopDebug d = gemm::MainloopDebug::from_env();
    EXPECT_EQ(d.stall_k_block, 3);
    EXPECT_EQ(d.pipeline_timeout_ns, 250'000'000ull);
  }
  for (const char* bad : {"-2", "4294967296"})
    EXPECT_NE(refusal("WEAVE_GEMM_DEBUG_STALL_K_BLOCK", bad).find("WEAVE_GEMM_DEBUG_STALL_K_BLOCK"), std::string::npos)
        << bad;
  for (const char* bad : {"-1", "3600001"})
    EXPECT_NE(refusal("WEAVE_GEMM_DEBUG_PIPELINE_TIMEOUT_MS", bad).find("WEAVE_GEMM_DEBUG_PIPELINE_TIMEOUT_MS"),
              std::string::npos)
        << bad;
  EXPECT_NE(refusal("WEAVE_GEMM_DEBUG_STALL_K_BLOCK", "two").find("WEAVE_GEMM_DEBUG_STALL_K_BLOCK"), std::string::npos);
}

// WEAVE_GEMV_PATH (the decode GEMV's weight path and TMA ring for planned calls): parsed, and
// anything else refused naming the variable and the rule.
TEST(GemmDebugKnobs, GemvPathIsParsedAndChecked) {
  using Path = detail::GemvArgs::Path;
  unsetenv("WEAVE_GEMV_PATH");
  EXPECT_EQ(detail::gemv_path_from_env().path, Path::kAuto);
  struct Good {
    const char* value;
    Path path;
    detail::RingShape ring;
    int depth = 0;
    int stages = 0;
  };
  const Good good[] = {{"auto", Path::kAuto, {}},        {"registers", Path::kRegisters, {}},
                       {"tma", Path::kTma, {}},          {"tma:4x2", Path::kTma, {4, 2}},
                       {"tma:1x2", Path::kTma, {1, 2}},  {"tma:16x1", Path::kTma, {16, 1}},
                       {"registers:4", Path::kRegisters, {}, 4}, {"registers:8", Path::kRegisters, {}, 8},
                       {"stream", Path::kStream, {}},    {"stream:2", Path::kStream, {}, 0, 2},
                       {"stream:12", Path::kStream, {}, 0, 12}, {"stream:16", Path::kStream, {}, 0, 16}};
  for (const Good& g : good) {
    ScopedEnv e("WEAVE_GEMV_PATH", g.value);
    const detail::GemvPathChoice c = detail::gemv_path_from_env();
    EXPECT_EQ(c.path, g.path) << g.value;
    EXPECT_TRUE(c.ring == g.ring) << g.value;
    EXPECT_EQ(c.depth, g.depth) << g.value;
    EXPECT_EQ(c.stages, g.stages) << g.value;
  }
  for (const char* bad : {"TMA", "regs", " tma", "tma:", "tma:3x2", "tma:4x8", "tma:1x1", "tma:4x2x", "tma:4x2 ",
                          "registers:", "registers:6", "registers:16", "registers:8x", "registersx", "registers: 8", "registers:08",
                          "stream:", "stream:1", "stream:17", "stream:08", "stream:-4", "stream: 4", "stream:4x", "streamx",
                          "Stream"}) {
    ScopedEnv e("WEAVE_GEMV_PATH", bad);
    try {
      detail::gemv_path_from_env();
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.status(), Status::kInvalidArgument);
      const std::string what = err.what();
      EXPECT_NE(what.find("WEAVE_GEMV_PATH"), std::string::npos) << what;
      EXPECT_NE(what.find("tma:QxS"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace weave
