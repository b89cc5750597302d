// Several collectives in one symmetric window (Collective::create_sharing_window): the ops see one
// window, each passes its self-test, and all of them run interleaved back to back on one stream
// (no host sync, fresh inputs every round, caller and window buffers) with every output of every
// round checked against values computed on the CPU. Sharing must not alias any op's regions.
#include <cstring>

#include "comm_support.hpp"
#include "common/check.hpp"

using namespace weave;
using namespace weave::test;


TEST(SharedWindow, OpsOfDifferentKindsShareOneWindowAndRunInterleaved) {
  WEAVE_REQUIRE_GPUS(2);
  const std::vector<CollectiveConfig> configs = {
      collective_config(CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kAuto, DType::kBF16, 1000001),
      collective_config(CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPush, DType::kBF16, 100003),
      collective_config(CollectiveOp::kReduceScatter, Transport::kLsa, Algorithm::kLowLatency, DType::kF32, 5001),
      collective_config(CollectiveOp::kAllReduce, Transport::kCe, Algorithm::kTwoShot, DType::kF32, 70001),
      collective_config(CollectiveOp::kAllGather, Transport::kNccl, Algorithm::kNcclDefault, DType::kBF16, 4096),
      collective_config(CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kLowLatency, DType::kBF16, 777),
      collective_config(CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPull, DType::kBF16, 50001),
  };
  // Call sizes per round: the largest, and a smaller one (auto all-reduce: two-shot, then ll).
  auto count_for = [](const CollectiveConfig& c, int round) { return round % 2 ? c.max_count : c.max_count / 3 + 1; };
  constexpr int kRounds = 12;
  for_each_rank([&](Communicator& c) {
    const int w = c.world_size(), r = c.rank();
    auto ops = Collective::create_sharing_window(c, configs);
    ASSERT_EQ(ops.size(), configs.size());
    for (const auto& op : ops) {
      EXPECT_EQ(&op->window(), &ops[0]->window()) << "every op must live in the one window";
      EXPECT_NE(op->describe().find("shared by"), std::string::npos) << op->describe();
      EXPECT_TRUE(op->self_test().ok);
    }
    struct Io {
      size_t in_bytes, out_bytes;
      DevBuf *ins, *hist;
    };
    std::vector<std::unique_ptr<DevBuf>> bufs;
    std::vector<Io> io;
    for (size_t i = 0; i < ops.size(); ++i) {
      const CollectiveConfig& cf = configs[i];
      const CallSizes largest = call_sizes(cf.op, cf.dtype, w, cf.max_count);
      bufs.push_back(std::make_unique<DevBuf>(largest.in_bytes() * kRounds));
      DevBuf* ins = bufs.back().get();
      bufs.push_back(std::make_unique<DevBuf>(largest.out_bytes() * kRounds));
      io.push_back({largest.in_bytes(), largest.out_bytes(), ins, bufs.back().get()});
      for (int k = 0; k < kRounds; ++k) {
        const size_t n = count_for(cf, k);
        std::vector<uint8_t> host;
        encode_input(host, cf.op, cf.dtype, r, call_sizes(cf.op, cf.dtype, w, n).in_elems, 1000 * i + k);
        WEAVE_CHECK_CUDA(cudaMemcpy(ins->as<char>() + k * io.back().in_bytes, host.data(), host.size(),
                                    cudaMemcpyHostToDevice));
      }
      WEAVE_CHECK_CUDA(cudaMemset(io.back().hist->p, 0xFF, io.back().hist->bytes));
    }
    DevBuf scratch_out(8 << 20);
    StreamHolder st;
    c.barrier();
    for (int k = 0; k < kRounds; ++k)
      for (size_t i = 0; i < ops.size(); ++i) {
        const size_t n = count_for(configs[i], k);
        const size_t out_now = call_sizes(configs[i].op, configs[i].dtype, w, n).out_bytes();
        // Odd rounds: the op's window buffers (zero-copy); even rounds: caller buffers.
        char* out = k % 2 ? static_cast<char*>(ops[i]->window_output()) : scratch_out.as<char>();
        ops[i]->run(io[i].ins->as<char>() + k * io[i].in_bytes, out, n, st.s);
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(io[i].hist->as<char>() + k * io[i].out_bytes, out, out_now,
                                         cudaMemcpyDeviceToDevice, st.s));
      }
    WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
    for (size_t i = 0; i < ops.size(); ++i) {
      ops[i]->check();
      std::vector<uint8_t> got(io[i].hist->bytes);
      WEAVE_CHECK_CUDA(cudaMemcpy(got.data(), io[i].hist->p, got.size(), cudaMemcpyDeviceToHost));
      for (int k = 0; k < kRounds; ++k) {
        const size_t n = count_for(configs[i], k);
        const auto want = expected_output(configs[i].op, configs[i].dtype, r, w, n, 1000 * i + k);
        EXPECT_EQ(std::memcmp(got.data() + k * io[i].out_bytes, want.data(), want.size()), 0)
            << "rank " << r << ", op " << i << " (" << ops[i]->describe() << "), round " << k << ", count " << n;
      }
    }
    c.barrier();
  });
}

TEST(SharedWindow, RefusesNcclCopyEngineAndEmptySets) {
  WEAVE_REQUIRE_GPUS(2);
  for_each_rank([&](Communicator& c) {
    try {
      Collective::create_sharing_window(c, {collective_config(CollectiveOp::kAllGather, Transport::kNccl,
                                                   Algorithm::kNcclCopyEngine, DType::kBF16, 4096)});
      ADD_FAILURE() << "nccl-ce accepted into a shared window";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_NE(e.message().find("nccl-ce"), std::string::npos) << e.message();
    }
    EXPECT_THROW(Collective::create_sharing_window(c, {}), Error);
    c.barrier();
  });
}
