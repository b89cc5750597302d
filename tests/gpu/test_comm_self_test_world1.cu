// Collective::self_test on one GPU (a world-1 communicator): every op, dtype and transport that
// runs at world 1 moves the self-test's position-dependent values through its real path and the
// pure check (comm/self_test_values) accepts them. The multi-GPU suite runs the same at world 2+;
// this is the part a one-GPU machine can run.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "comm/timeout.hpp"
#include "hopper/ptx/misc.cuh"
#include "support/gpu.hpp"
#include "weave/collectives.hpp"
#include "weave/communicator.hpp"
#include "weave/error.hpp"

using namespace weave;

TEST(CommSelfTestWorld1, EveryOpDtypeAndTransportThatRuns) {
  WEAVE_REQUIRE_GPUS(1);
  auto comms = Communicator::create_local({0});
  ASSERT_EQ(comms.size(), 1u);
  int ran = 0;
  for (CollectiveOp op : {CollectiveOp::kAllGather, CollectiveOp::kReduceScatter, CollectiveOp::kAllReduce})
    for (DType dt : {DType::kF32, DType::kBF16})
      for (Transport t : {Transport::kNccl, Transport::kLsa, Transport::kCe}) {
        if (op == CollectiveOp::kAllGather && dt == DType::kBF16) continue;
        CollectiveConfig cfg;
        cfg.op = op;
        cfg.dtype = dt;
        cfg.transport = t;
        cfg.max_count = 1 << 16;
        std::unique_ptr<Collective> c;
        try {
          c = std::make_unique<Collective>(*comms[0], cfg);
        } catch (const Error& e) {
          // A transport that does not run at world 1 (or is compiled out) says why; nothing ran.
          std::printf("  %s %s %s: not run (%s)\n", std::string(to_string(op)).c_str(),
                      std::string(to_string(dt)).c_str(), std::string(to_string(t)).c_str(), e.what());
          continue;
        }
        for (std::size_t count : {std::size_t{1}, std::size_t{777}, std::size_t{1} << 16}) {
          const SelfTestReport r = c->self_test(count);
          EXPECT_TRUE(r.ok) << c->describe() << " count " << count << ": " << r.detail;
          EXPECT_TRUE(r.caller_buffers_ok && r.window_buffers_ok) << r.detail;
          ++ran;
        }
      }
  std::printf("  world-1 self-tests passed: %d\n", ran);
  EXPECT_GT(ran, 0) << "no collective ran at world 1";
}

namespace {
// Spins for `ns` nanoseconds of wall time.
__global__ void spin_for(uint64_t ns) {
  const uint64_t t0 = weave::ptx::globaltimer_ns();
  while (weave::ptx::globaltimer_ns() - t0 < ns) {
  }
}
}  // namespace

TEST(CommHostWait, BoundedStreamWaitNamesWhatItWaitedFor) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  spin_for<<<1, 1, 0, s>>>(300'000'000ull);  // 0.3 s
  try {
    comm::sync_stream_bounded(s, 0.05, "the test's spinning kernel");
    ADD_FAILURE() << "a 0.3 s kernel passed a 0.05 s bounded wait";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kTimeout);
    EXPECT_NE(std::string(e.what()).find("the test's spinning kernel: still running after"), std::string::npos)
        << e.what();
  }
  comm::sync_stream_bounded(s, 10.0, "the same kernel, with time to finish");  // returns
  spin_for<<<1, 1, 0, s>>>(1000);
  comm::sync_stream_bounded(s, 10.0, "a short kernel");
  cudaStreamDestroy(s);
}
