// Negative controls of GemmAllGather over real NCCL communicators (W >= 2; the emulated world's are
// tests/gpu/test_gemm_all_gather.cu): the arrival wait and the credit, each switched off through
// the internal testing hooks, must make rank 0's copy of its output wrong (elements that differ
// from split-lsa's quiet output of the same inputs, itself held to the NCCL-made reference); with
// them on, the same runs give split-lsa's bits on every rank.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "comm/timeout.hpp"
#include "comm_support.hpp"
#include "fused_calls.hpp"
#include "fused_controls.hpp"
#include "fused_op_world.hpp"

using namespace weave;
using namespace weave::test;
using Mode = GemmAllGatherMode;

// Rank 1 is slow (each tile's stores 20 ms late); rank 0 copies its output as soon as its own call
// ends. With the arrival wait: right. Without it (skip_arrival_wait): rank 1's rows are still
// poison on rank 0. fused-ce: skipping the wait stores every pull trigger at once, so the copies
// read rank 1's rows before its tiles are there.
TEST(MultiGpuGemmAllGather, SkippingTheArrivalWaitIsCaught) {
  WEAVE_REQUIRE_GPUS(2);
  const int w = local_world();
  const int64_t n = 256, k = 256, m = 256;
  for (Mode mode : {Mode::kFusedLsa, Mode::kFusedCe})
    for (bool skip : {false, true}) {
      SCOPED_TRACE(std::string(to_string(mode)) + (skip ? ", arrival wait SKIPPED" : ""));
      int64_t wrong0 = -1;
      std::string reason;
      for_each_rank([&](Communicator& c) {
        const int r = c.rank();
        StreamHolder st;
        const bench::DeviceOperand b = b_operand<AgWorld>(c, 31, n, k);
        const std::vector<QuietCall> calls = split_lsa_calls<AgWorld>(c, n, k, {m}, b, 3100, st.s);
        bench::DeviceBuffer snap(calls[0].want.bytes());
        fused::GemmAllGatherHooks hooks;
        hooks.skip_arrival_wait = skip;
        if (r == 1) hooks.delay_stores_ns = 20'000'000;
        std::string why;
        auto op = try_make<AgWorld>(c, AgWorld::config(mode, n, k, m), hooks, why);
        if (!op) {
          if (r == 0) reason = why;
          return;
        }
        poison_whole_output<AgWorld>(c, *op, n, st.s);
        op->run(m, calls[0].a.view, b.view, {}, st.s);
        snapshot_now<AgWorld>(*op, m, snap, st.s);
        comm::sync_stream_bounded(st.s, 2 * c.timeout_s() + 10, "the controlled call");
        const int64_t wrong = count_wrong(snap.get(), calls[0], st.s);
        if (r == 0) wrong0 = wrong;
        if (!skip) {
          op->check();
          EXPECT_EQ(wrong, 0) << "with the arrival wait every row is there, rank " << r;
        }
        c.barrier();  // rank 1's late stores into its peers done before the windows go
      });
      if (!reason.empty()) {
        print_not_run("gemm-ag", ScaleMode::kBF16, mode, w, reason);
        continue;
      }
      if (skip) EXPECT_GT(wrong0, 0) << "skipping the arrival wait must leave the slow peer's rows missing";
      std::printf("  gemm-ag W%d %s, arrival wait %s: rank 0 saw %lld wrong elements of %lld\n", w,
                  std::string(to_string(mode)).c_str(), skip ? "SKIPPED" : "on", static_cast<long long>(wrong0),
                  static_cast<long long>(w * m * n));
    }
}

// The credit, per fused mode. fused-lsa: rank 0 reads call 1's output 30 ms after its call (a slow
// consumer) while the others go straight on to call 2 with other values; with credits their call 2
// waits for rank 0 to start call 2, without (flow_control = false) call 2's rows overwrite what
// rank 0 has not read yet. fused-ce: the credit protects the SENDER's own rows, which its peers
// pull during their call: rank 0 pulls slowly (each chunk's trigger 30 ms late); with credits the
// others' call 2 waits until rank 0's call 2 starts, i.e. until its call-1 pulls ended; without,
// they overwrite their rows before rank 0 pulled them.
TEST(MultiGpuGemmAllGather, DisablingTheCreditIsCaught) {
  WEAVE_REQUIRE_GPUS(2);
  const int w = local_world();
  const int64_t n = 256, k = 256, m = 256;
  for (Mode mode : {Mode::kFusedLsa, Mode::kFusedCe})
    for (bool credits : {true, false}) {
      SCOPED_TRACE(std::string(to_string(mode)) + (credits ? "" : ", credits OFF"));
      const bool pull = mode == Mode::kFusedCe;
      int64_t wrong0 = -1;
      std::string reason;
      for_each_rank([&](Communicator& c) {
        const int r = c.rank();
        StreamHolder st;
        const bench::DeviceOperand b = b_operand<AgWorld>(c, 37, n, k);
        const std::vector<QuietCall> calls = split_lsa_calls<AgWorld>(c, n, k, {m, m}, b, 3700, st.s);
        bench::DeviceBuffer snap(calls[0].want.bytes());
        fused::GemmAllGatherHooks hooks;
        hooks.flow_control = credits;
        if (pull && r == 0) hooks.delay_pull_ns = 30'000'000;
        std::string why;
        auto op = try_make<AgWorld>(c, AgWorld::config(mode, n, k, m), hooks, why);
        if (!op) {
          if (r == 0) reason = why;
          return;
        }
        poison_whole_output<AgWorld>(c, *op, n, st.s);
        op->run(m, calls[0].a.view, b.view, {}, st.s);
        if (r == 0) {
          if (!pull) spin_delay(30'000'000, st.s);  // the slow consumer
          snapshot_now<AgWorld>(*op, m, snap, st.s);
        }
        op->run(m, calls[1].a.view, b.view, {}, st.s);
        comm::sync_stream_bounded(st.s, 4 * c.timeout_s() + 10, "two calls");
        op->check();
        if (r == 0) wrong0 = count_wrong(snap.get(), calls[0], st.s);
        if (credits) EXPECT_EQ(count_wrong(op->output(m).data, calls[1], st.s), 0) << "call 2, rank " << r;
        c.barrier();
      });
      if (!reason.empty()) {
        print_not_run("gemm-ag", ScaleMode::kBF16, mode, w, reason);
        continue;
      }
      if (credits) EXPECT_EQ(wrong0, 0) << "with credits the slow reader sees call 1's rows";
      else EXPECT_GT(wrong0, 0) << "without credits the next call must overwrite rows not yet read";
      std::printf("  gemm-ag W%d %s, credits %s: the slow %s saw %lld wrong elements of call 1\n", w,
                  std::string(to_string(mode)).c_str(), credits ? "on" : "OFF", pull ? "puller" : "reader",
                  static_cast<long long>(wrong0));
    }
}
