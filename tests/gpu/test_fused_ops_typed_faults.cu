// Faults a fused op must survive or report, over both operators (fused_op_typed.hpp).
//
// Issue 36 item 5 (docs/memory_ordering.md "pipeline-abort"): a GEMM pipeline that stalls inside a
// fused op's kernel is that op's error. Its kernels write their ring-wait timeouts into the op's
// own record (fused/pipeline_record.hpp), so the op's check() raises kTimeout naming the stalled
// wait, on every later call too, and the process-wide record that weave::Gemm reports stays
// empty: before, the op's check() was clean and the next unrelated weave::Gemm raised it.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "comm/timeout.hpp"
#include "fused_op_typed.hpp"
#include "hopper/wait_record.hpp"
#include "support/expect_error.hpp"
#include "support/scoped_env.hpp"
#include "testing/emulated_world.hpp"
#include "testing/spin_delay.hpp"

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

// Issue 36 item 6 (docs/memory_ordering.md "wrap"): flags and credits last written long ago (the
// op's slots start stale_slot_lag calls behind its epoch) must not pass this call's waits. Lag
// 2^32 - 1001 reads as "1000 calls ahead", inside the old window (2^20): every wait passed at once
// and the fused call summed or copied whatever the peers' slots held; lag 2^31 + 5 is the
// collectives' case. A late rank (2 ms) makes a wait that passes too early visible as wrong rows.
TYPED_TEST(EmulatedFusedOp, SlotsLastWrittenLongAgoDoNotPassWaits) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 512, m = 256;
  for (uint32_t lag : {0xFFFFFFFFu - 1000u, 0x80000000u + 5u}) {
    bench::EmulatedWorld ew(2, 0, 20);
    SCOPED_TRACE("stale_slot_lag " + std::to_string(lag));
    ew.run([&](comm::Group& g) {
      auto cfg = T::config(T::kQuants[0], T::kFused, n, k, m);
      typename T::Hooks hooks;
      hooks.stale_slot_lag = lag;
      auto op = T::create(g, cfg, hooks);
      typename T::OneHot oh(m, n, k, g.rank());
      Stream st;
      // Every call its own A (a wait that passes early then shows the previous call's rows).
      std::vector<bench::DeviceBuffer> as, snaps;
      for (int call = 0; call < 3; ++call) {
        const auto h = oh.host_a(7 + call, m);
        as.emplace_back(m * k * 2);
        as.back().upload(h.data(), h.size() * 2);
        snaps.emplace_back(T::out_rows(2, m) * n * 2);
      }
      g.barrier();
      for (int call = 0; call < 3; ++call) {
        if (g.rank() == 1) bench::spin_delay(2'000'000, st.s);
        op->run(m, TensorView::matrix(as[call].get(), DType::kBF16, m, k, g.device()), oh.b_view(g.device()), {}, st.s);
        g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues")
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(snaps[call].get(), op->output(m).data, snaps[call].bytes(),
                                         cudaMemcpyDeviceToDevice, st.s));
      }
      comm::sync_stream_bounded(st.s, 20, "calls over stale slots");
      op->check();
      for (int call = 0; call < 3; ++call) {
        std::vector<uint8_t> h(snaps[call].bytes());
        snaps[call].download(h.data(), h.size());
        oh.expect_right(h, DType::kBF16, 7 + call, 2, m, "rank " + std::to_string(g.rank()) + " call " + std::to_string(call));
      }
      g.barrier();
    });
  }
}

// Issue 36 item 11: the dropped-wait negative control through every fused GEMM instance (one per
// quant of the op's fused mode; test_gemm_controls.cu covers the local-store instances). With
// WEAVE_GEMM_DEBUG_DROP_WAIT=1 the fused kernel's consumers read each stage before its TMA has
// landed; the op's own self_test (known values, scales varying per block) must then fail on some
// rank, while without the switch it passes: proof that the fused tests can see a pipeline race.
TYPED_TEST(EmulatedFusedOp, ADroppedPipelineWaitFailsTheSelfTestInEveryQuant) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  // K 2048: 16 (fp8) or 32 (bf16) K blocks per tile, several laps of the stage ring.
  const int64_t n = 512, k = 2048, m = 512;
  bench::EmulatedWorld ew(2, 0, 20);
  int caught = 0;
  for (const QuantCase& q : T::kQuants) {
    SCOPED_TRACE(std::string(T::kName) + " " + q.name);
    for (bool drop : {false, true}) {
      std::vector<int> failed(2, 0);
      std::string detail;
      {
        std::optional<ScopedEnv> env;
        if (drop) env.emplace("WEAVE_GEMM_DEBUG_DROP_WAIT", "1");
        ew.run([&](comm::Group& g) {
          auto op = T::create(g, T::config(q, T::kFused, n, k, m));
          const SelfTestReport rep = op->self_test(m);
          failed[g.rank()] = rep.ok ? 0 : 1;
          if (!rep.ok && g.rank() == 0) detail = rep.detail;
        });
      }
      const int ranks_failed = failed[0] + failed[1];
      if (!drop) {
        EXPECT_EQ(ranks_failed, 0) << "without the switch: " << detail;
        continue;
      }
      EXPECT_GT(ranks_failed, 0) << "the dropped wait went unnoticed by the self-test";
      caught += ranks_failed > 0;
      std::printf("  %s %-14s dropped wait: self-test failed on %d of 2 ranks\n", T::kName, q.name, ranks_failed);
    }
  }
  EXPECT_EQ(caught, static_cast<int>(std::size(T::kQuants)));
}

}  // namespace
}  // namespace weave::test
