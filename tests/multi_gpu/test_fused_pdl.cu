// A consumer launched with programmatic dependent launch (PDL) right after a fused op's run() on
// the same stream, over real NCCL communicators. What the ops promise (weave/gemm_all_reduce.hpp,
// gemm_all_gather.hpp, and the sequence-parallel pair by reference): such a kernel must call
// cudaGridDependencySynchronize() (griddepcontrol.wait) before it reads the output, and then reads
// the finished output, whichever kernel the call ends with (the lsa collectives let the next grid
// launch early: docs/memory_ordering.md "pdl"). Checked per op and mode (GemmAllReduce's decode
// GEMV with allow_pdl on, so it launches with PDL too), back-to-back calls with a rank 2 ms late
// (the others' last kernels then wait on it while the consumer is already resident): every
// consumer's copy bitwise equal to the call's quiet output. The negative control: a consumer that
// does not wait reads the output before split-lsa's collective finished it, and must count wrong
// elements (at W >= 2, where there is a peer to wait for).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/timeout.hpp"
#include "comm_support.hpp"
#include "fused_back_to_back.hpp"
#include "fused_calls.hpp"
#include "fused_op_world.hpp"
#include "support/gpu.hpp"
#include "testing/pdl_copy.hpp"
#include "testing/reduce_reference.hpp"

using namespace weave;
using namespace weave::test;

namespace {

constexpr uint64_t kLateNs = 2'000'000;

// The control: split-lsa, each call alone (barriers around it), rank (round + call) % W 2 ms late,
// the output read by a PDL consumer that does NOT wait. Returns the wrong elements over every
// rank's reads; the consumer starts as soon as the collective kernel lets dependents launch, while
// that kernel still waits for the late rank.
template <class T>
int64_t wrong_reads_of_a_consumer_that_does_not_wait(int64_t n, int64_t k, const std::vector<int64_t>& ms, int rounds) {
  const int w = local_world();
  int64_t m_max = 0;
  for (int64_t m : ms) m_max = std::max(m_max, m);
  std::vector<int64_t> wrong(w, 0);
  for_each_rank([&](Communicator& c) {
    const int r = c.rank();
    auto split = T::make(c, T::config(T::kSplitLsa, n, k, m_max));
    StreamHolder st;
    const bench::DeviceOperand b = b_operand<T>(c, 23, n, k);
    const std::vector<QuietCall> calls =
        quiet_calls<T>(c, *split, *split, ms, n, k, b, 8800, st.s, std::string(T::kName) + " split-lsa");
    for (int round = 0; round < rounds; ++round)
      for (size_t i = 0; i < calls.size(); ++i) {
        const QuietCall& call = calls[i];
        const size_t bytes = call.want.bytes();
        bench::DeviceBuffer snap(bytes);
        poison_whole_output<T>(c, *split, n, st.s);  // barriers: one call at a time across the ranks
        if ((round + static_cast<int>(i)) % w == r) spin_delay(kLateNs, st.s);
        split->run(call.m, call.a.view, b.view, {}, st.s);
        bench::launch_pdl_copy(split->output(call.m).data, snap.get(), bytes, /*wait=*/false, st.s);
        comm::sync_stream_bounded(st.s, 2 * c.timeout_s() + 5, "a call read by a consumer that does not wait");
        split->check();
        wrong[r] += bench::gpu_count_differing(snap.get(), call.want.get(), bytes / 2, DType::kBF16, st.s);
      }
    c.barrier();
  });
  int64_t total = 0;
  for (int64_t x : wrong) total += x;
  return total;
}

}  // namespace

// M of many tiles, a partial tile, one row and a decode batch (decode, and auto, take the last two).
TEST(MultiGpuGemmAllReduce, APdlConsumerRightAfterRunReadsTheFinishedOutput) {
  WEAVE_REQUIRE_GPUS(1);
  every_mode_back_to_back_with_a_delayed_rank<ArWorld>(512, 256, {1100, 77, 1, 24}, kLateNs,
                                                       ReadAfterRun::kPdlConsumer);
}

TEST(MultiGpuGemmAllGather, APdlConsumerRightAfterRunReadsTheFinishedOutput) {
  WEAVE_REQUIRE_GPUS(1);
  every_mode_back_to_back_with_a_delayed_rank<AgWorld>(512, 256, {640, 77, 1, 300}, kLateNs,
                                                       ReadAfterRun::kPdlConsumer);
}

TEST(MultiGpuGemmReduceScatter, APdlConsumerRightAfterRunReadsTheFinishedOutput) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t w = local_world();
  every_mode_back_to_back_with_a_delayed_rank<RsWorld>(512, 256, {512 * w, w, 128 * w, 33 * w}, kLateNs,
                                                       ReadAfterRun::kPdlConsumer);
}

// AllGatherGemm's call ends in a tiled GEMM, which lets no dependent start early: the waiting
// consumer is right by construction, and the test holds the op to it.
TEST(MultiGpuAllGatherGemm, APdlConsumerRightAfterRunReadsTheFinishedOutput) {
  WEAVE_REQUIRE_GPUS(1);
  every_mode_back_to_back_with_a_delayed_rank<AgmWorld>(512, 256, {640, 77, 1, 300}, kLateNs,
                                                        ReadAfterRun::kPdlConsumer);
}

// The PDL tests' teeth: where a call ends in an lsa collective (split-lsa of the three collective-
// last ops), a consumer that skips the wait must read a half-made output. (AllGatherGemm's call
// ends in its GEMM, which lets nothing start early: no control there.)
TEST(MultiGpuFusedOps, APdlConsumerThatDoesNotWaitReadsAnUnfinishedOutput) {
  WEAVE_REQUIRE_GPUS(2);
  const int64_t w = local_world();
  const int64_t ar = wrong_reads_of_a_consumer_that_does_not_wait<ArWorld>(512, 256, {1100, 77}, 5);
  const int64_t ag = wrong_reads_of_a_consumer_that_does_not_wait<AgWorld>(512, 256, {640, 77}, 5);
  const int64_t rs = wrong_reads_of_a_consumer_that_does_not_wait<RsWorld>(512, 256, {512 * w, 33 * w}, 5);
  EXPECT_GT(ar, 0) << "GemmAllReduce split-lsa: a consumer that does not wait must read partial sums";
  EXPECT_GT(ag, 0) << "GemmAllGather split-lsa: a consumer that does not wait must read rows not yet gathered";
  EXPECT_GT(rs, 0) << "GemmReduceScatter split-lsa: a consumer that does not wait must read partial sums";
  std::printf("  consumers without the wait, split-lsa W%lld, 10 calls each: %lld (gemm-ar), %lld (gemm-ag), %lld "
              "(gemm-rs) wrong elements over every rank\n",
              static_cast<long long>(w), static_cast<long long>(ar), static_cast<long long>(ag),
              static_cast<long long>(rs));
}
