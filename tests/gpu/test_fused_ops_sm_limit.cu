// max_sms (GemmAllReduceConfig / GemmAllGatherConfig): the fused kernel's grid stays within the
// cap, so SMs remain free for another communicator's kernels on the same GPU (the fused headers'
// contract), and the output is still right with so few CTAs; the plan and describe() say so.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "comm/timeout.hpp"
#include "fused_op_traits_all_gather.hpp"
#include "fused_op_traits_all_reduce.hpp"
#include "fused_test_support.hpp"
#include "support/gpu.hpp"
#include "testing/emulated_world.hpp"

using namespace weave;

namespace {

template <class T>
void a_capped_grid_stays_capped_and_right() {
  const int64_t n = 512, k = 256, m = 1000;
  constexpr int kCap = 6;
  const int world = 2;
  bench::EmulatedWorld ew(world, 0, 20);
  ew.run([&](comm::Group& g) {
    auto cfg = T::config(T::kQuants[0], T::kFused, n, k, m);
    cfg.max_sms = kCap;
    auto op = T::create(g, cfg);
    typename T::OneHot oh(m, n, k, g.rank());
    test::Stream st;
    EXPECT_EQ(op->plan(m).grid, kCap) << "the plan's CTAs per rank";
    EXPECT_NE(op->describe().find(std::to_string(kCap) + " CTAs per rank"), std::string::npos) << op->describe();
    for (uint64_t seed : {11u, 12u}) {  // two calls: the second finds the first's output, poisoned again
      oh.set_a(seed, m);
      const TensorView out = op->output(m);
      WEAVE_CHECK_CUDA(cudaMemsetAsync(out.data, 0xFF, static_cast<size_t>(out.rows() * out.cols()) * 2, st.s));
      g.barrier();
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();
      comm::sync_stream_bounded(st.s, 20, "a call with max_sms");
      op->check();
      std::vector<uint8_t> h(static_cast<size_t>(out.rows() * out.cols()) * 2);
      WEAVE_CHECK_CUDA(cudaMemcpy(h.data(), out.data, h.size(), cudaMemcpyDeviceToHost));
      oh.expect_right(h, DType::kBF16, seed, world, m, std::string(T::kName) + " max_sms " + std::to_string(kCap));
      g.barrier();
    }
  });
  std::printf("  %s: fused at max_sms %d: right on both ranks\n", T::kName, kCap);
}

}  // namespace

TEST(FusedOpSmLimit, GemmAllReduceStaysWithinMaxSms) {
  WEAVE_REQUIRE_GPUS(1);
  a_capped_grid_stays_capped_and_right<test::AllReduceTraits>();
}

TEST(FusedOpSmLimit, GemmAllGatherStaysWithinMaxSms) {
  WEAVE_REQUIRE_GPUS(1);
  a_capped_grid_stays_capped_and_right<test::AllGatherTraits>();
}
