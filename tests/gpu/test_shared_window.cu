// weave::create_sharing_window in the emulated world (W ranks as threads on one GPU): a
// collective, two GemmAllGathers, a GemmAllReduce, a GemmReduceScatter and two AllGatherGemms in
// ONE window. Every op lies in the same
// window, each op's self-test passes, then the ops run interleaved on one stream, several times
// each, and self-test again (each keeps its own epochs, credits and flags); a bad config is
// refused naming its list and index before any window exists.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "comm/collective_impl.hpp"
#include "fused/ag_gemm/impl.hpp"
#include "fused/all_gather/impl.hpp"
#include "fused/all_reduce/impl.hpp"
#include "fused/reduce_scatter/impl.hpp"
#include "fused/shared_window.hpp"
#include "fused_test_support.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "testing/emulated_world.hpp"

using namespace weave;

namespace {

CollectiveConfig all_reduce_config() {
  CollectiveConfig c;
  c.op = CollectiveOp::kAllReduce;
  c.dtype = DType::kBF16;
  c.transport = Transport::kLsa;
  c.max_count = 1 << 20;
  return c;
}

GemmAllGatherConfig gather_config(GemmAllGatherMode mode, ScaleMode quant) {
  GemmAllGatherConfig c;
  c.n = 256;
  c.k = 512;
  c.m_max = 600;
  c.quant = quant;
  c.mode = mode;
  return c;
}

GemmAllReduceConfig reduce_config() {
  GemmAllReduceConfig c;
  c.n = 384;
  c.k = 256;
  c.m_max = 1100;
  c.quant = ScaleMode::kPtpc;
  c.mode = GemmAllReduceMode::kFused;
  return c;
}

GemmReduceScatterConfig reduce_scatter_config() {
  GemmReduceScatterConfig c;
  c.n = 256;
  c.k = 384;
  c.m_max = 1024;
  c.quant = ScaleMode::kBF16;
  c.mode = GemmReduceScatterMode::kFused;  // m a multiple of world x 128 below
  return c;
}

AllGatherGemmConfig all_gather_gemm_config(AllGatherGemmMode mode, ScaleMode quant) {
  AllGatherGemmConfig c;
  c.n = 256;
  c.k = 512;
  c.m_max = 300;
  c.quant = quant;
  c.mode = mode;
  return c;
}

// One list filled, the others empty.
template <class Config>
SharedWindowConfigs only(std::vector<Config> SharedWindowConfigs::*list, std::vector<Config> configs) {
  SharedWindowConfigs c;
  c.*list = std::move(configs);
  return c;
}

}  // namespace

TEST(EmulatedSharedWindow, CollectiveAndFusedOpsShareOneWindowAndInterleave) {
  WEAVE_REQUIRE_GPUS(1);
  for (int world : {2, 4}) {
    SCOPED_TRACE("W" + std::to_string(world));
    bench::EmulatedWorld ew(world, 0, 20);
    ew.run([&](comm::Group& g) {
      SharedWindowConfigs configs;
      configs.collectives = {all_reduce_config()};
      configs.all_gathers = {gather_config(GemmAllGatherMode::kFusedLsa, ScaleMode::kBF16),
                             gather_config(GemmAllGatherMode::kAuto, ScaleMode::kBlockscale)};
      configs.all_reduces = {reduce_config()};
      configs.reduce_scatters = {reduce_scatter_config()};
      configs.all_gather_gemms = {all_gather_gemm_config(AllGatherGemmMode::kSplitLsa, ScaleMode::kPtpc),
                                  all_gather_gemm_config(AllGatherGemmMode::kSplitCe, ScaleMode::kBF16)};
      SharedWindowOps ops = fused::create_sharing(g, configs);
      ASSERT_EQ(ops.collectives.size(), 1u);
      ASSERT_EQ(ops.all_gathers.size(), 2u);
      ASSERT_EQ(ops.all_reduces.size(), 1u);
      ASSERT_EQ(ops.reduce_scatters.size(), 1u);
      ASSERT_EQ(ops.all_gather_gemms.size(), 2u);
      // One window: the same local base address for every op.
      const char* base = Collective::Impl::of(*ops.collectives[0]).win->local();
      for (auto& op : ops.all_gathers) EXPECT_EQ(GemmAllGather::Impl::of(*op).rt->window().local(), base);
      EXPECT_EQ(GemmAllReduce::Impl::of(*ops.all_reduces[0]).rt->window().local(), base);
      EXPECT_EQ(GemmReduceScatter::Impl::of(*ops.reduce_scatters[0]).ar->rt->window().local(), base);
      for (auto& op : ops.all_gather_gemms) EXPECT_EQ(AllGatherGemm::Impl::of(*op).rt->window().local(), base);
      auto check_all = [&](const char* when) {
        EXPECT_TRUE(ops.collectives[0]->self_test(1000).ok) << when;
        for (auto& op : ops.all_gathers)
          for (int64_t m : {1, 300, 600}) {
            const SelfTestReport rep = op->self_test(m);
            EXPECT_TRUE(rep.ok) << when << ": " << rep.detail;
          }
        for (int64_t m : {33, 1100}) {
          const SelfTestReport rep = ops.all_reduces[0]->self_test(m);
          EXPECT_TRUE(rep.ok) << when << ": " << rep.detail;
        }
        for (int64_t m : {int64_t{128} * world, int64_t{256} * world}) {  // fused: whole 128-row bands
          const SelfTestReport rep = ops.reduce_scatters[0]->self_test(m);
          EXPECT_TRUE(rep.ok) << when << ": " << rep.detail;
        }
        for (auto& op : ops.all_gather_gemms)
          for (int64_t m : {1, 300}) {
            const SelfTestReport rep = op->self_test(m);
            EXPECT_TRUE(rep.ok) << when << ": " << rep.detail;
          }
      };
      check_all("first");
      // Interleaved, back to back: every op's self-test again, several rounds, in a rank-agreed order.
      for (int round = 0; round < 3; ++round) check_all("interleaved");
    });
  }
}

TEST(EmulatedSharedWindow, ABadConfigIsNamedByListAndIndex) {
  WEAVE_REQUIRE_GPUS(1);
  bench::EmulatedWorld ew(2, 0, 10);
  ew.run([&](comm::Group& g) {
    GemmAllReduceConfig bad = reduce_config();
    bad.n = 100;  // not a multiple of 8
    const std::string msg = test::error_of([&] { fused::create_sharing(g, only(&SharedWindowConfigs::all_reduces, {reduce_config(), bad})); });
    EXPECT_NE(msg.find("create_sharing_window: all_reduces[1]:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("multiple of 8"), std::string::npos) << msg;
    CollectiveConfig ce = all_reduce_config();
    ce.algorithm = Algorithm::kNcclCopyEngine;
    const std::string msg2 = test::error_of([&] { fused::create_sharing(g, only(&SharedWindowConfigs::collectives, {ce})); });
    EXPECT_NE(msg2.find("collectives[0] uses algorithm 'nccl-ce'"), std::string::npos) << msg2;
    EXPECT_NE(test::error_of([&] { fused::create_sharing(g, {}); }).find("name no op"), std::string::npos);
    // The sequence-parallel pair's lists too.
    GemmReduceScatterConfig bad_rs = reduce_scatter_config();
    bad_rs.m_max = 100;  // fused needs m_max >= world x 128
    const std::string msg3 = test::error_of([&] { fused::create_sharing(g, only(&SharedWindowConfigs::reduce_scatters, {bad_rs})); });
    EXPECT_NE(msg3.find("create_sharing_window: reduce_scatters[0]:"), std::string::npos) << msg3;
    AllGatherGemmConfig bad_agm = all_gather_gemm_config(AllGatherGemmMode::kSplitLsa, ScaleMode::kMxfp8);
    bad_agm.k = 160;  // mxfp8 needs K % 128 == 0
    const std::string msg4 = test::error_of([&] {
      fused::create_sharing(g, only(&SharedWindowConfigs::all_gather_gemms,
                                    {all_gather_gemm_config(AllGatherGemmMode::kAuto, ScaleMode::kBF16), bad_agm}));
    });
    EXPECT_NE(msg4.find("create_sharing_window: all_gather_gemms[1]:"), std::string::npos) << msg4;
  });
}
