// Negative controls of GemmAllReduce and GemmReduceScatter over real NCCL communicators (W >= 2;
// the emulated world's are tests/gpu/test_gemm_all_reduce_controls.cu and
// test_gemm_reduce_scatter.cu): each mechanism switched off through the internal testing hooks must
// make rank 0's output wrong (elements that differ from split-lsa's quiet output of the same
// inputs, itself held to the NCCL-made reference), while the same run with every mechanism on
// gives split-lsa's bits on every rank. Rank 0's output is copied on its stream right after its
// call, before a late peer's stores can mend it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "comm/timeout.hpp"
#include "comm_support.hpp"
#include "fused_calls.hpp"
#include "fused_controls.hpp"
#include "fused_op_world.hpp"

using namespace weave;
using namespace weave::test;

namespace {

// Rank 1 stores every tile 2 ms late; one chunk per band, at most 32 CTAs per rank and M = 4096 W
// rows of N 512: a band of 32 row blocks x 4 column blocks is four waves, so a chunk's tiles land
// over ~8 ms and a wait that passes at its first tile, or not at all, reads missing partials.
constexpr uint64_t kSlowStoresNs = 2'000'000;
constexpr int kControlSms = 32;

struct WaitControl {
  const char* name;
  bool partial_wait_skipped, election_off, arrival_wait_skipped;
  bool mechanism_on() const { return !partial_wait_skipped && !election_off && !arrival_wait_skipped; }
};

}  // namespace

// fused, fused-rs and fused-ce: skipping the partial wait (own tiles summed before the peers'
// partials landed; fused-ce: the combine's wait for the landed copies), the chunk election (a
// chunk's flag, or copy, after its first tile) or the arrival wait (rank 0 reads its output as soon
// as its own kernel ends; fused-ce: every copy triggered at once, before its chunk is there).
TEST(MultiGpuGemmAllReduce, SkippingAWaitOrTheElectionIsCaught) {
  WEAVE_REQUIRE_GPUS(2);
  using Mode = GemmAllReduceMode;
  const int w = local_world();
  const int64_t n = 512, k = 256, m = 4096 * int64_t(w);
  struct Case {
    Mode mode;
    WaitControl ctl;
  };
  const Case cases[] = {
      {Mode::kFused, {"fused, every mechanism on", false, false, false}},
      {Mode::kFused, {"fused, partial wait SKIPPED", true, false, false}},
      {Mode::kFused, {"fused, chunk election OFF", false, true, false}},
      {Mode::kFused, {"fused, arrival wait SKIPPED", false, false, true}},
      {Mode::kFusedRs, {"fused-rs, every mechanism on", false, false, false}},
      {Mode::kFusedRs, {"fused-rs, tail's partial wait SKIPPED", true, false, false}},
      {Mode::kFusedRs, {"fused-rs, arrival wait SKIPPED", false, false, true}},
      {Mode::kFusedCe, {"fused-ce, every mechanism on", false, false, false}},
      {Mode::kFusedCe, {"fused-ce, landed wait SKIPPED", true, false, false}},
      {Mode::kFusedCe, {"fused-ce, chunk election OFF", false, true, false}},
      {Mode::kFusedCe, {"fused-ce, trigger waits SKIPPED", false, false, true}},
  };
  const size_t kCases = std::size(cases);
  std::vector<int64_t> wrong0(kCases, -1);  // rank 0's wrong elements per case
  std::vector<std::string> reasons(kCases);
  for_each_rank([&](Communicator& c) {
    const int r = c.rank();
    StreamHolder st;
    const bench::DeviceOperand b = b_operand<ArWorld>(c, 17, n, k);
    const std::vector<QuietCall> calls = split_lsa_calls<ArWorld>(c, n, k, {m}, b, 1700, st.s);
    bench::DeviceBuffer snap(calls[0].want.bytes());
    for (size_t i = 0; i < kCases; ++i) {
      const WaitControl& ctl = cases[i].ctl;
      GemmAllReduceConfig cfg = ArWorld::config(cases[i].mode, n, k, m);
      cfg.chunks = 1;
      cfg.max_sms = kControlSms;
      fused::GemmAllReduceHooks hooks;
      hooks.skip_partial_wait = ctl.partial_wait_skipped;
      hooks.publish_every_tile = ctl.election_off;
      hooks.skip_arrival_wait = ctl.arrival_wait_skipped;
      if (r == 1) hooks.delay_stores_ns = kSlowStoresNs;
      std::string why;
      auto op = try_make<ArWorld>(c, cfg, hooks, why);
      if (!op) {
        if (r == 0) reasons[i] = why;
        continue;  // every rank alike
      }
      poison_whole_output<ArWorld>(c, *op, n, st.s);
      op->run(m, calls[0].a.view, b.view, {}, st.s);
      snapshot_now<ArWorld>(*op, m, snap, st.s);
      comm::sync_stream_bounded(st.s, 2 * c.timeout_s() + 10, std::string("the controlled call: ") + ctl.name);
      const int64_t wrong = count_wrong(snap.get(), calls[0], st.s);
      if (r == 0) wrong0[i] = wrong;
      if (ctl.mechanism_on()) {
        op->check();
        EXPECT_EQ(wrong, 0) << ctl.name << ", rank " << r;
      }
      c.barrier();  // every rank's kernels done before the op (its window) goes
    }
  });
  for (size_t i = 0; i < kCases; ++i) {
    const WaitControl& ctl = cases[i].ctl;
    if (!reasons[i].empty()) {
      print_not_run("gemm-ar", ScaleMode::kBF16, cases[i].mode, w, std::string(ctl.name) + ": " + reasons[i]);
      continue;
    }
    if (!ctl.mechanism_on()) EXPECT_GT(wrong0[i], 0) << ctl.name << " must corrupt rank 0's output";
    std::printf("  gemm-ar W%d %s: rank 0 saw %lld wrong elements of %lld\n", w, ctl.name,
                static_cast<long long>(wrong0[i]), static_cast<long long>(m * n));
  }
}

// fused-ce needs its credit: a peer's copy engine reads this rank's final rows during the peer's
// call, and a call of another M owns other rows. Rank 0 pulls slowly (each gather trigger 3 ms
// late); the others run call 1 at m = 1024 and go straight on to call 2 at m = 2048, whose band 0
// (rank 0's) covers rank 1's band of call 1: rank 1 stores call 2's partials of band 0 into the
// very rows rank 0 still pulls. With the credit, call 2's stores wait for rank 0's call 2 (after
// its pulls of call 1 joined): rank 0's copy of call 1 is right. Without it, it must not be.
TEST(MultiGpuGemmAllReduce, FusedCeCreditKeepsAFastRankFromOverwritingWhatASlowPullerReads) {
  WEAVE_REQUIRE_GPUS(2);
  const int w = local_world();
  const int64_t n = 512, k = 256, m1 = 1024, m2 = 2048;
  std::vector<int64_t> wrong0(2, -1);
  std::string reason;
  for_each_rank([&](Communicator& c) {
    const int r = c.rank();
    StreamHolder st;
    const bench::DeviceOperand b = b_operand<ArWorld>(c, 19, n, k);
    const std::vector<QuietCall> calls = split_lsa_calls<ArWorld>(c, n, k, {m1, m2}, b, 1900, st.s);
    bench::DeviceBuffer snap(calls[0].want.bytes());
    for (bool credit : {true, false}) {
      GemmAllReduceConfig cfg = ArWorld::config(GemmAllReduceMode::kFusedCe, n, k, m2);
      cfg.chunks = 1;
      fused::GemmAllReduceHooks hooks;
      hooks.flow_control = credit;
      if (r == 0) hooks.delay_pull_ns = 3'000'000;
      std::string why;
      auto op = try_make<ArWorld>(c, cfg, hooks, why);
      if (!op) {
        if (r == 0) reason = why;
        return;
      }
      poison_whole_output<ArWorld>(c, *op, n, st.s);
      op->run(m1, calls[0].a.view, b.view, {}, st.s);
      if (r == 0) snapshot_now<ArWorld>(*op, m1, snap, st.s);
      op->run(m2, calls[1].a.view, b.view, {}, st.s);
      comm::sync_stream_bounded(st.s, 4 * c.timeout_s() + 10, "two calls of fused-ce");
      op->check();
      EXPECT_EQ(count_wrong(op->output(m2).data, calls[1], st.s), 0) << "call 2, rank " << r << ", credit " << credit;
      if (r == 0) wrong0[credit ? 0 : 1] = count_wrong(snap.get(), calls[0], st.s);
      c.barrier();
    }
  });
  if (!reason.empty()) {
    print_not_run("gemm-ar", ScaleMode::kBF16, GemmAllReduceMode::kFusedCe, w, reason);
    return;
  }
  EXPECT_EQ(wrong0[0], 0) << "with the credit, rank 0's pulls of call 1 read call 1's rows";
  EXPECT_GT(wrong0[1], 0) << "without the credit, call 2 must overwrite rows rank 0 still pulls";
  std::printf("  gemm-ar fused-ce W%d, slow puller: call 1 on rank 0 had %lld wrong elements with the credit, %lld "
              "without\n",
              w, static_cast<long long>(wrong0[0]), static_cast<long long>(wrong0[1]));
}

// GemmReduceScatter's fused mode (GemmAllReduce's kernel without the gather leg), M = 4096 W:
//  - the partial wait skipped, or the chunk election off, with rank 1 slow: rank 0 sums its band
//    before rank 1's partials landed;
//  - the end-of-call wait skipped (the staging's credit), with rank 0 slow and a second call of
//    other values right after: the others end call 1 before rank 0 summed its band and store call
//    2's partials into rank 0's staging while rank 0 still reads it.
TEST(MultiGpuGemmReduceScatter, SkippingAWaitOrTheElectionIsCaught) {
  WEAVE_REQUIRE_GPUS(2);
  const int w = local_world();
  const int64_t n = 512, k = 256, m = 4096 * int64_t(w);
  struct Case {
    WaitControl ctl;
    bool two_calls;  // rank 0 slow, a second call right after (the end-of-call wait's cases)
  };
  const Case cases[] = {
      {{"every mechanism on (rank 1 slow)", false, false, false}, false},
      {{"partial wait SKIPPED", true, false, false}, false},
      {{"chunk election OFF", false, true, false}, false},
      {{"every mechanism on (rank 0 slow, two calls)", false, false, false}, true},
      {{"end-of-call wait SKIPPED", false, false, true}, true},
  };
  const size_t kCases = std::size(cases);
  std::vector<int64_t> wrong0(kCases, -1);
  for_each_rank([&](Communicator& c) {
    const int r = c.rank();
    StreamHolder st;
    const bench::DeviceOperand b = b_operand<RsWorld>(c, 29, n, k);
    const std::vector<QuietCall> calls = split_lsa_calls<RsWorld>(c, n, k, {m, m}, b, 2900, st.s);
    bench::DeviceBuffer snap(calls[0].want.bytes());
    for (size_t i = 0; i < kCases; ++i) {
      const WaitControl& ctl = cases[i].ctl;
      GemmReduceScatterConfig cfg = RsWorld::config(GemmReduceScatterMode::kFused, n, k, m);
      cfg.chunks = 1;
      cfg.max_sms = kControlSms;
      fused::GemmAllReduceHooks hooks;
      hooks.skip_partial_wait = ctl.partial_wait_skipped;
      hooks.publish_every_tile = ctl.election_off;
      hooks.skip_arrival_wait = ctl.arrival_wait_skipped;
      if (r == (cases[i].two_calls ? 0 : 1)) hooks.delay_stores_ns = kSlowStoresNs;
      auto op = RsWorld::make(c, cfg, hooks);
      poison_whole_output<RsWorld>(c, *op, n, st.s);
      op->run(m, calls[0].a.view, b.view, {}, st.s);
      snapshot_now<RsWorld>(*op, m, snap, st.s);
      if (cases[i].two_calls) op->run(m, calls[1].a.view, b.view, {}, st.s);
      comm::sync_stream_bounded(st.s, 4 * c.timeout_s() + 10, std::string("the controlled calls: ") + ctl.name);
      const int64_t wrong = count_wrong(snap.get(), calls[0], st.s);
      if (r == 0) wrong0[i] = wrong;
      if (ctl.mechanism_on()) {
        op->check();
        EXPECT_EQ(wrong, 0) << ctl.name << ", rank " << r;
        if (cases[i].two_calls)
          EXPECT_EQ(count_wrong(op->output(m).data, calls[1], st.s), 0) << ctl.name << ", call 2, rank " << r;
      }
      c.barrier();
    }
  });
  for (size_t i = 0; i < kCases; ++i) {
    const WaitControl& ctl = cases[i].ctl;
    if (!ctl.mechanism_on()) EXPECT_GT(wrong0[i], 0) << ctl.name << " must corrupt rank 0's band";
    std::printf("  gemm-rs W%d %s: rank 0 saw %lld wrong elements of %lld\n", w, ctl.name,
                static_cast<long long>(wrong0[i]), static_cast<long long>(m / w * n));
  }
}
