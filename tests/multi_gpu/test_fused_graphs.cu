// The fused operators in CUDA graphs over real NCCL communicators (one rank per GPU; world 1 on a
// one-GPU machine), across the 2^32 epoch wrap, every mode (split-nccl and fused-ce included):
// each rank captures, per call (two M, three fresh random A each), [A -> the live A, NaN poison of
// the output, run(), a device count of the output's elements that differ from the call's quiet
// output (fused_calls.hpp)], then replays the graphs 1000 times in an order every rank shares, the
// op's epochs started 50 calls before the wrap. A replay that reads a stale input, passes a wait on
// a stale epoch or leaves rows unwritten counts wrong elements; every graph must be replayed.
// Over NCCL the replays need no barrier between launches (no shared hardware queue; the emulated
// world's lockstep, tests/gpu, does), and an eager NCCL barrier between graphs that hold NCCL
// calls (split-nccl) is better left out.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/timeout.hpp"
#include "comm_support.hpp"
#include "common/check.hpp"
#include "fused_calls.hpp"
#include "fused_op_world.hpp"
#include "support/graph_replay.hpp"
#include "testing/count_differing.hpp"

using namespace weave;
using namespace weave::test;

namespace {

constexpr uint32_t kEpochsBeforeWrap = 50;  // the quiet calls (at most 9), then the replays cross 2^32
constexpr int kVariants = 3, kReplays = 1000;

// Every mode of T: graphs of the calls of `ms` (those the mode runs) replayed across the wrap.
template <class T>
void graph_replays_across_the_epoch_wrap(int64_t n, int64_t k, const std::vector<int64_t>& ms) {
  const int w = local_world();
  int64_t m_max = 0;
  for (int64_t m : ms) m_max = std::max(m_max, m);
  for (typename T::Mode mode : T::modes()) {
    std::vector<int64_t> call_ms;  // kVariants calls of each M the mode runs
    for (int64_t m : ms)
      if (T::runs(mode, w, m))
        for (int v = 0; v < kVariants; ++v) call_ms.push_back(m);
    if (call_ms.empty()) {
      print_not_run(T::kShort, ScaleMode::kBF16, mode, w, "none of the test's M fits the mode");
      continue;
    }
    SCOPED_TRACE(std::string(T::kName) + " " + std::string(to_string(mode)) + " W" + std::to_string(w));
    std::string reason;
    std::vector<unsigned long long> wrong_on(w, 0);
    for_each_rank([&](Communicator& c) {
      const int r = c.rank(), dev = c.device();
      typename T::Hooks hooks;
      hooks.initial_epoch = 0xFFFFFFFFu - kEpochsBeforeWrap;
      std::string why;
      auto op = try_make<T>(c, T::config(mode, n, k, m_max), hooks, why);
      if (!op) {
        if (r == 0) reason = why;
        return;
      }
      auto split = T::make(c, T::config(T::kSplitLsa, n, k, m_max));
      StreamHolder st;
      const bench::DeviceOperand b = b_operand<T>(c, 41, n, k);
      const std::string what = std::string(T::kName) + " " + std::string(to_string(mode)) + " graphs";
      const std::vector<QuietCall> calls = quiet_calls<T>(c, *op, *split, call_ms, n, k, b, 3300, st.s, what);
      // The live A every graph's call reads (its variant copied in first), one counter per graph.
      bench::DeviceBuffer a_live(static_cast<size_t>(m_max * k) * 2), wrong(8 * calls.size());
      WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, wrong.bytes()));
      // Captures apart from the set-up (barriers around them): a peer's allocation or synchronous
      // copy during a capture can invalidate it (seen in the emulated world, tests/gpu).
      c.barrier();
      std::vector<cudaGraph_t> graphs;
      for (size_t i = 0; i < calls.size(); ++i) {
        const QuietCall& call = calls[i];
        const TensorView a = TensorView::matrix(a_live.get(), DType::kBF16, call.m, k, dev);
        cudaGraph_t graph;
        WEAVE_CHECK_CUDA(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal));
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(a_live.get(), call.a.values.get(), call.a.values.bytes(),
                                         cudaMemcpyDeviceToDevice, st.s));
        poison_before_call<T>(*op, w, r, call.m, n, st.s);
        op->run(call.m, a, b.view, {}, st.s);
        bench::gpu_add_differing(op->output(call.m).data, call.want.get(), call.want.bytes() / 2, DType::kBF16,
                                 wrong.as<unsigned long long>() + i, st.s, 64);
        poison_after_call<T>(*op, w, r, call.m, n, st.s);
        WEAVE_CHECK_CUDA(cudaStreamEndCapture(st.s, &graph));
        graphs.push_back(graph);
      }
      c.barrier();
      poison_whole_output<T>(c, *op, n, st.s);  // the first replay of each M finds every row poisoned
      const std::vector<int> launched =
          replay_graphs(graphs, kReplays, 99, st.s, [&c] { c.barrier(); }, nullptr, 120 + 2 * c.timeout_s());
      op->check();
      std::vector<unsigned long long> per_graph(calls.size());
      wrong.download(per_graph.data(), wrong.bytes());
      std::string which;
      for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_GT(launched[i], 0) << what << ": graph " << i << " never replayed";
        wrong_on[r] += per_graph[i];
        if (per_graph[i])
          which += " graph " + std::to_string(i) + " (m " + std::to_string(calls[i].m) + ", " +
                   std::to_string(launched[i]) + " replays): " + std::to_string(per_graph[i]) + ";";
      }
      EXPECT_EQ(wrong_on[r], 0ull) << what << ", rank " << r << ": wrong elements over " << kReplays << " replays:"
                                   << which;
      c.barrier();
    });
    if (!reason.empty()) {
      print_not_run(T::kShort, ScaleMode::kBF16, mode, w, reason);
      continue;
    }
    std::printf("  %s %s W%d: %d replays of %zu graphs from 2^32 - %u: %llu wrong elements (rank 0)\n", T::kShort,
                std::string(to_string(mode)).c_str(), w, kReplays, call_ms.size(), kEpochsBeforeWrap, wrong_on[0]);
  }
}

}  // namespace

// M of many tiles and of a partial one; 8 rows for decode (M <= 32), which auto also takes there.
TEST(MultiGpuGemmAllReduce, GraphReplaysAcrossTheEpochWrapWithChangingInputs) {
  WEAVE_REQUIRE_GPUS(1);
  graph_replays_across_the_epoch_wrap<ArWorld>(256, 256, {1000, 77, 8});
}

TEST(MultiGpuGemmAllGather, GraphReplaysAcrossTheEpochWrapWithChangingInputs) {
  WEAVE_REQUIRE_GPUS(1);
  graph_replays_across_the_epoch_wrap<AgWorld>(256, 256, {512, 77});
}

// M multiples of W: whole-tile bands (fused) and bands of a partial tile (the split modes).
TEST(MultiGpuGemmReduceScatter, GraphReplaysAcrossTheEpochWrapWithChangingInputs) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t w = local_world();
  graph_replays_across_the_epoch_wrap<RsWorld>(256, 256, {256 * w, 128 * w, 33 * w});
}

TEST(MultiGpuAllGatherGemm, GraphReplaysAcrossTheEpochWrapWithChangingInputs) {
  WEAVE_REQUIRE_GPUS(1);
  graph_replays_across_the_epoch_wrap<AgmWorld>(256, 256, {512, 77});
}
