// CUDA graphs: every transport captured (three back-to-back calls per graph), replayed hundreds
// of times with the inputs changed between replays (outside the graph); every replay's outputs are
// checked against that replay's inputs, so a replay that reuses stale data or a stale epoch fails.
#include <cstring>

#include "comm_support.hpp"
#include "common/check.hpp"

using namespace weave;
using namespace weave::test;

namespace {

struct GraphCase {
  CollectiveOp op;
  Transport t;
  Algorithm a;
  int replays;
};

// A replay that returns another variant's result (stale inputs, a stale epoch) is caught only
// where the variants' outputs differ, so they must differ in most elements: with the old linear
// values (period 3 in the variant) variant 3 equalled variant 0. Rule: on every rank, every pair
// of variants differs in at least half the output elements. Checked on the host before any rank
// runs (a failure inside the per-rank threads would leave the other ranks waiting).
void expect_variants_distinct(CollectiveOp op, DType dtype, int world, size_t count, int variants) {
  const CallSizes sz = call_sizes(op, dtype, world, count);
  for (int r = 0; r < world; ++r) {
    std::vector<std::vector<uint8_t>> out;
    for (int v = 0; v < variants; ++v) out.push_back(expected_output(op, dtype, r, world, count, v));
    for (int a = 0; a < variants; ++a)
      for (int b = a + 1; b < variants; ++b) {
        size_t differ = 0;
        for (size_t i = 0; i < sz.out_elems; ++i) differ += std::memcmp(&out[a][i * sz.esz], &out[b][i * sz.esz], sz.esz) != 0;
        EXPECT_GE(2 * differ, sz.out_elems) << to_string(op) << " rank " << r << ": variants " << a << " and " << b
                                            << " differ in only " << differ << " of " << sz.out_elems << " elements";
      }
  }
}

}  // namespace

TEST(CommGraphs, EveryTransportReplaysWithInputsChangedBetweenReplays) {
  WEAVE_REQUIRE_GPUS(2);
  const GraphCase cases[] = {
      {CollectiveOp::kAllGather, Transport::kNccl, Algorithm::kNcclDefault, 200},
      {CollectiveOp::kAllGather, Transport::kNccl, Algorithm::kNcclCopyEngine, 200},
      {CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPush, 300},
      {CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPull, 300},
      {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPush, 1000},
      {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPull, 300},
      {CollectiveOp::kReduceScatter, Transport::kNccl, Algorithm::kNcclDefault, 200},
      {CollectiveOp::kReduceScatter, Transport::kCe, Algorithm::kPush, 300},
      {CollectiveOp::kReduceScatter, Transport::kLsa, Algorithm::kPush, 300},
      {CollectiveOp::kAllReduce, Transport::kNccl, Algorithm::kNcclDefault, 200},
      {CollectiveOp::kAllReduce, Transport::kCe, Algorithm::kOneShot, 300},
      {CollectiveOp::kAllReduce, Transport::kCe, Algorithm::kTwoShot, 300},
      {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kOneShot, 1000},
      {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kTwoShot, 1000},
      {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kLowLatency, 1000},
      {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kLowLatency, 1000},
      {CollectiveOp::kReduceScatter, Transport::kLsa, Algorithm::kLowLatency, 300},
  };
  constexpr int kCallsPerGraph = 3, kVariants = 4;
  const DType dtype = DType::kBF16;
  const size_t count = 12345;
  for (const GraphCase& gc : cases) {
    SCOPED_TRACE(std::string(to_string(gc.op)) + "/" + std::string(to_string(gc.t)) + "/" + std::string(to_string(gc.a)));
    expect_variants_distinct(gc.op, dtype, local_world(), count, kVariants);
    if (::testing::Test::HasFailure()) return;
    for_each_rank([&](Communicator& c) {
      const int w = c.world_size(), r = c.rank();
      Collective op(c, collective_config(gc.op, gc.t, gc.a, dtype, count));
      const CallSizes sz = call_sizes(gc.op, dtype, w, count);
      const size_t in_elems = sz.in_elems, in_bytes = sz.in_bytes(), out_bytes = sz.out_bytes();
      // Variant v of my input, prepared once on the device.
      DevBuf variants(in_bytes * kVariants), ins(in_bytes * kCallsPerGraph), outs(out_bytes * kCallsPerGraph);
      std::vector<uint8_t> host;
      for (int v = 0; v < kVariants; ++v) {
        encode_input(host, gc.op, dtype, r, in_elems, v);
        WEAVE_CHECK_CUDA(cudaMemcpy(variants.as<char>() + v * in_bytes, host.data(), in_bytes, cudaMemcpyHostToDevice));
      }
      // Expected outputs per variant.
      std::vector<std::vector<uint8_t>> expect;
      for (int v = 0; v < kVariants; ++v) expect.push_back(expected_output(gc.op, dtype, r, w, count, v));
      StreamHolder st;
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      WEAVE_CHECK_CUDA(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal));
      for (int k = 0; k < kCallsPerGraph; ++k)
        op.run(ins.as<char>() + k * in_bytes, outs.as<char>() + k * out_bytes, count, st.s);
      WEAVE_CHECK_CUDA(cudaStreamEndCapture(st.s, &graph));
      WEAVE_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      int64_t wrong = 0;
      std::vector<uint8_t> got(out_bytes * kCallsPerGraph);
      for (int rep = 0; rep < gc.replays; ++rep) {
        for (int k = 0; k < kCallsPerGraph; ++k)
          WEAVE_CHECK_CUDA(cudaMemcpyAsync(ins.as<char>() + k * in_bytes,
                                           variants.as<char>() + ((rep + k) % kVariants) * in_bytes, in_bytes,
                                           cudaMemcpyDeviceToDevice, st.s));
        WEAVE_CHECK_CUDA(cudaMemsetAsync(outs.p, 0xFF, outs.bytes, st.s));
        WEAVE_CHECK_CUDA(cudaGraphLaunch(exec, st.s));
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(got.data(), outs.p, got.size(), cudaMemcpyDeviceToHost, st.s));
        WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
        for (int k = 0; k < kCallsPerGraph; ++k)
          wrong += std::memcmp(got.data() + k * out_bytes, expect[(rep + k) % kVariants].data(), out_bytes) != 0;
        if (wrong) break;
      }
      op.check();
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      EXPECT_EQ(wrong, 0) << "rank " << r << ": replays with a wrong output";
      c.barrier();
    });
  }
}
