// Issue 16 items 3 and 7 (comm/call_order.hpp): a rank's calls of every op run on the GPU in the
// order the host issued them, also across streams. Emulated world, W = 2. Each rank issues call 1 on
// stream s1 behind a 30 ms spin, then call 2 on stream s2 at once. Ordered, call 2 waits on the GPU
// for call 1 (its completion is not reached 10 ms later, and the output is call 2's); the negative
// control (ordering off) shows call 2 running first: complete at 10 ms, and for one op the output
// left by the reordered calls is call 1's.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "comm/call_order.hpp"
#include "comm/collective_impl.hpp"
#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "fused_test_support.hpp"
#include "support/gpu.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/spin_delay.hpp"

using namespace weave;
using test::Stream;

namespace {

constexpr size_t kCount = 4096;

CollectiveConfig lsa_config(CollectiveOp op) {
  CollectiveConfig cfg;
  cfg.op = op;
  cfg.transport = Transport::kLsa;
  cfg.algorithm = Algorithm::kAuto;
  cfg.dtype = DType::kF32;
  cfg.max_count = kCount;
  return cfg;
}

// Small integers: every fp32 sum over ranks is exact.
float value(int rank, int call, size_t i) { return static_cast<float>((i * 7 + rank * 3 + call * 11) % 64); }

std::vector<float> values(int rank, int call) {
  std::vector<float> v(kCount);
  for (size_t i = 0; i < kCount; ++i) v[i] = value(rank, call, i);
  return v;
}

struct Outcome {
  bool second_done_early = false;  // call 2 complete 10 ms after issue, while call 1 still waits
  bool output_is_second = false;   // one op: the all-reduce output is call 2's (else call 1's)
};

// One rank's two calls: `first` on s1 behind the spin, `second` on s2; lockstep barriers after each
// enqueue (testing/emulated_world.hpp "Queues").
Outcome two_calls(comm::Group& g, Collective& first, Collective& second, bool same_op) {
  const int r = g.rank(), w = g.world_size();
  bench::DeviceBuffer in1(kCount * 4), in2(kCount * 4), out1(kCount * 4), out2(kCount * 4 * w);
  in1.upload(values(r, 1).data(), kCount * 4);
  in2.upload(values(r, 2).data(), kCount * 4);
  Stream s1, s2;
  cudaEvent_t done2 = nullptr;
  WEAVE_CHECK_CUDA(cudaEventCreateWithFlags(&done2, cudaEventDisableTiming));
  g.barrier();
  bench::spin_delay(30'000'000, s1.s);
  first.run(in1.get(), out1.get(), kCount, s1.s);
  g.barrier();
  second.run(in2.get(), same_op ? out1.get() : out2.get(), kCount, s2.s);
  WEAVE_CHECK_CUDA(cudaEventRecord(done2, s2.s));
  g.barrier();
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  Outcome o;
  o.second_done_early = cudaEventQuery(done2) == cudaSuccess;
  comm::sync_stream_bounded(s1.s, 20, "call 1");
  comm::sync_stream_bounded(s2.s, 20, "call 2");
  cudaEventDestroy(done2);
  first.check();
  second.check();
  if (same_op) {
    std::vector<float> got(kCount);
    out1.download(got.data(), kCount * 4);
    int64_t second_ok = 0;
    for (size_t i = 0; i < kCount; ++i) {
      float want = 0;
      for (int s = 0; s < w; ++s) want += value(s, 2, i);
      second_ok += got[i] == want;
    }
    o.output_is_second = second_ok == static_cast<int64_t>(kCount);
  }
  g.barrier();
  return o;
}

}  // namespace

TEST(CallOrder, OneOpCalledOnTwoStreamsRunsInHostOrderAndTheNegativeControlDoesNot) {
  WEAVE_REQUIRE_GPUS(1);
  for (bool ordered : {true, false}) {
    comm::CallOrder::set_enabled_for_testing(ordered);
    bench::EmulatedWorld ew(2, 0, 10);
    std::vector<Outcome> out(2);
    ew.run([&](comm::Group& g) {
      auto op = Collective::Impl::create(g, lsa_config(CollectiveOp::kAllReduce));
      out[g.rank()] = two_calls(g, *op, *op, /*same_op=*/true);
    });
    comm::CallOrder::set_enabled_for_testing(true);
    for (int r = 0; r < 2; ++r) {
      std::printf("  ordering %s, rank %d: call 2 complete at 10 ms: %d, output is call 2's: %d\n",
                  ordered ? "on" : "OFF", r, out[r].second_done_early, out[r].output_is_second);
      EXPECT_EQ(out[r].second_done_early, !ordered) << "rank " << r;
      EXPECT_EQ(out[r].output_is_second, ordered) << "rank " << r << ": the last call issued must be the last run";
    }
  }
}

TEST(CallOrder, TwoOpsOnTwoStreamsRunInHostOrderAndTheNegativeControlDoesNot) {
  WEAVE_REQUIRE_GPUS(1);
  for (bool ordered : {true, false}) {
    comm::CallOrder::set_enabled_for_testing(ordered);
    bench::EmulatedWorld ew(2, 0, 10);
    std::vector<Outcome> out(2);
    ew.run([&](comm::Group& g) {
      auto ar = Collective::Impl::create(g, lsa_config(CollectiveOp::kAllReduce));
      auto ag = Collective::Impl::create(g, lsa_config(CollectiveOp::kAllGather));
      out[g.rank()] = two_calls(g, *ar, *ag, /*same_op=*/false);
    });
    comm::CallOrder::set_enabled_for_testing(true);
    for (int r = 0; r < 2; ++r) EXPECT_EQ(out[r].second_done_early, !ordered) << "rank " << r << " ordering " << ordered;
  }
}
