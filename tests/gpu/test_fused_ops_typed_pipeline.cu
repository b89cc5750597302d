// Issue 36 item 5 (docs/memory_ordering.md "pipeline-abort"): a GEMM pipeline that stalls inside a
// fused op's kernel is that op's error. Its kernels write their ring-wait timeouts into the op's
// own record (fused/pipeline_record.hpp), so the op's check() raises kTimeout naming the stalled
// wait, on every later call too, and the process-wide record that weave::Gemm reports stays
// empty: before, the op's check() was clean and the next unrelated weave::Gemm raised it.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "comm/timeout.hpp"
#include "fused_op_typed.hpp"
#include "hopper/wait_record.hpp"
#include "support/expect_error.hpp"
#include "support/scoped_env.hpp"
#include "testing/emulated_world.hpp"

namespace weave::test {
namespace {

TYPED_TEST(EmulatedFusedOp, AStalledPipelineIsTheFusedOpsErrorNotTheNextGemms) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 512, m = 256;
  (void)hopper::take_wait_timeout_report();  // nothing left over from an earlier test
  // K block 1 of each CTA's first tile is never loaded; the ring waits give up after 300 ms.
  const ScopedEnv stall("WEAVE_GEMM_DEBUG_STALL_K_BLOCK", "1");
  const ScopedEnv bound("WEAVE_GEMM_DEBUG_PIPELINE_TIMEOUT_MS", "300");
  bench::EmulatedWorld ew(1, 0, 5.0);  // world 1: the fused kernel with no peer, nothing else waits
  ew.run([&](comm::Group& g) {
    auto op = T::create(g, T::config(T::kQuants[0], T::kFused, n, k, m));
    typename T::OneHot oh(m, n, k, g.rank());
    oh.set_a(1, m);
    Stream st;
    op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
    comm::sync_stream_bounded(st.s, 20, "the call whose pipeline stalls");
    const std::string msg = error_of([&] { op->check(); }, Status::kTimeout);
    EXPECT_NE(msg.find(T::kName), std::string::npos) << msg;
    EXPECT_NE(msg.find("GEMM pipeline wait timed out"), std::string::npos) << msg;
    std::printf("  %s: %s\n", T::kName, msg.c_str());
    // Latched: the op stays unusable, and says so again.
    EXPECT_NE(error_of([&] { op->check(); }, Status::kTimeout).find("GEMM pipeline wait timed out"), std::string::npos);
    EXPECT_FALSE(
        error_of([&] { op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s); }, Status::kTimeout)
            .empty());
  });
  EXPECT_EQ(hopper::take_wait_timeout_report(), "") << "the fused op's stall reached the process-wide record";
}

}  // namespace
}  // namespace weave::test
