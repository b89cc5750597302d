// AllGatherGemm over real NCCL communicators, through the public API: one rank per visible Hopper
// GPU (world 1 on a one-GPU machine; W over NVLink on a multi-GPU one).
//   - every mode x quant through self_test (every source rank's rows checked on every rank against
//     the closed form); gemm-only, which moves nothing, fails it at W >= 2;
//   - at model sizes (a column-parallel projection: N_r 4096, K 7168), every mode bitwise equal to
//     split-lsa (a gather moves bytes; split-nccl too), identical on every rank, within the bound of
//     an independent reference per source rank (CUDA-core GEMMs of every rank's A, made here);
//   - a soak of 10,000 calls against split-lsa's bits; a peer that never arrives.
// Elsewhere over NCCL: graph replays (test_fused_graphs.cu), a delayed rank
// (test_fused_delayed_rank.cu), a PDL consumer (test_fused_pdl.cu), the scale gather's control
// (test_fused_controls_self_test.cu).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/timeout.hpp"
#include "comm_support.hpp"
#include "common/check.hpp"
#include "common/hash.hpp"
#include "fused_op_world.hpp"
#include "fused_peer_timeout.hpp"
#include "fused_soak.hpp"
#include "fused_support.hpp"
#include "support/expect_error.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "testing/reduce_reference.hpp"
#include "weave/all_gather_gemm.hpp"

using namespace weave;
using namespace weave::test;
using Mode = AllGatherGemmMode;

namespace {

const ScaleMode kQuants[] = {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8};

constexpr auto agm_config = &fused_op_config<AllGatherGemmConfig>;

}  // namespace

TEST(MultiGpuAllGatherGemm, SelfTestEveryModeAndQuant) {
  WEAVE_REQUIRE_GPUS(1);
  const int w = local_world();
  for (ScaleMode q : kQuants)
    for (Mode mode : {Mode::kAuto, Mode::kSplitNccl, Mode::kSplitLsa, Mode::kSplitCe}) {
      SCOPED_TRACE(std::string(to_string(q)) + " " + std::string(to_string(mode)) + " W" + std::to_string(w));
      std::string reason;
      for_each_rank([&](Communicator& c) {
        std::string why;
        auto op = make_or_reason<AllGatherGemm>(c, agm_config(q, mode, 512, 384 * (q == ScaleMode::kBF16 ? 1 : 2), 1100), why);
        if (!op) {
          if (c.rank() == 0) reason = why;
          return;
        }
        for (int64_t m : {1, 77, 128, 1000}) {
          const SelfTestReport rep = op->self_test(m);
          EXPECT_TRUE(rep.ok) << "m " << m << ": " << rep.detail;
        }
      });
      if (!reason.empty()) print_not_run("ag-gemm", q, mode, w, reason);
    }
}

TEST(MultiGpuAllGatherGemm, SelfTestFailsWhenNothingMoves) {
  WEAVE_REQUIRE_GPUS(2);
  for_each_rank([&](Communicator& c) {
    AllGatherGemm op(c, agm_config(ScaleMode::kBF16, Mode::kGemmOnly, 256, 512, 1024));
    const SelfTestReport rep = op.self_test(200);
    EXPECT_FALSE(rep.ok) << rep.detail;
    EXPECT_EQ(rep.wrong_from_rank[c.rank()], 0) << "the own rows are gathered locally";
  });
}

TEST(MultiGpuAllGatherGemm, EveryModeEqualsSplitBitwiseAndTheReferenceAtModelSizes) {
  WEAVE_REQUIRE_GPUS(1);
  const int w = local_world();
  const int64_t n = 4096, k = 7168, m_max = 2048;
  const Mode modes[] = {Mode::kSplitCe, Mode::kSplitNccl, Mode::kAuto};
  for (ScaleMode q : kQuants) {
    SCOPED_TRACE(std::string(to_string(q)) + " W" + std::to_string(w));
    std::vector<std::string> reasons(std::size(modes));
    for_each_rank([&](Communicator& c) {
      const int r = c.rank(), dev = c.device();
      StreamHolder st;
      AllGatherGemmConfig lsa_cfg = agm_config(q, Mode::kSplitLsa, n, k, m_max);
      if (q == ScaleMode::kMxfp8) lsa_cfg.mx_route = MxRoute::kNative;  // one kernel for every mode's bits
      AllGatherGemm split(c, lsa_cfg);
      std::vector<std::unique_ptr<AllGatherGemm>> ops;
      for (size_t i = 0; i < std::size(modes); ++i) {
        AllGatherGemmConfig cfg = agm_config(q, modes[i], n, k, m_max);
        if (q == ScaleMode::kMxfp8) cfg.mx_route = MxRoute::kNative;
        std::string why;
        ops.push_back(make_or_reason<AllGatherGemm>(c, cfg, why));
        if (r == 0) reasons[i] = why;
      }
      const bench::DeviceOperand b = operand(77, n, k, q, ref::Operand::kB, dev);  // one B on every rank
      for (int64_t m : {int64_t(1), int64_t(128), int64_t(1000), m_max}) {
        std::vector<bench::DeviceOperand> as;  // every rank's A, made here for the reference
        for (int s = 0; s < w; ++s) as.push_back(operand(1000 * m + s, m, k, q, ref::Operand::kA, dev));
        const size_t bytes = static_cast<size_t>(w * m * n) * 2;
        const std::vector<uint8_t> want = poisoned_call(c, split, m, bytes, as[r], b, st.s);
        bench::DeviceBuffer ref(static_cast<size_t>(m * n) * 4);
        const GemmProblem p{.m = m, .n = n, .k = k, .mode = q, .scale_layout = ScaleLayout::kRaw, .out_dtype = DType::kBF16};
        for (int s = 0; s < w; ++s) {
          bench::gpu_reference_gemm(p, as[s].view, b.view, GemmScales{as[s].scale_view, b.scale_view}, ref.as<float>(), st.s);
          const TensorView rows = TensorView::matrix(static_cast<char*>(split.output(m).data) + s * m * n * 2,
                                                     DType::kBF16, m, n, dev);
          const ref::Comparison cmp = bench::gpu_compare(rows, ref.as<float>(), bench::gemm_tolerance(q, DType::kBF16), st.s);
          EXPECT_EQ(cmp.wrong, 0) << "m " << m << " source " << s << ": " << cmp.wrong << " of " << cmp.count
                                  << " beyond the bound, rel_l2 " << cmp.rel_l2;
          EXPECT_LT(cmp.rel_l2, 1e-2) << "m " << m << " source " << s;
        }
        const auto hashes = c.all_gather(fnv1a64(want.data(), want.size()), "the output hash");
        for (int s = 1; s < w; ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": rank " << s << " differs";
        for (size_t i = 0; i < ops.size(); ++i) {
          if (!ops[i]) continue;
          const std::vector<uint8_t> got = poisoned_call(c, *ops[i], m, bytes, as[r], b, st.s);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0)
              << "m " << m << ": " << to_string(modes[i]) << " (ran " << to_string(ops[i]->last_mode())
              << ") differs from split-lsa";
        }
      }
    });
    for (size_t i = 0; i < std::size(modes); ++i)
      if (!reasons[i].empty()) print_not_run("ag-gemm", q, modes[i], w, reasons[i]);
  }
}

// 10,000 calls of random m over every mode, each output NaN-poisoned first and compared bit for bit
// with split-lsa's output of the same inputs (fused_soak.hpp); now and then one rank is late.
TEST(MultiGpuAllGatherGemm, RandomisedSoakAgainstSplit) {
  WEAVE_REQUIRE_GPUS(1);
  randomised_soak_against_split<AgmWorld>({Mode::kSplitLsa, Mode::kSplitCe, Mode::kSplitNccl, Mode::kAuto}, 256, 256,
                                          512, [](std::mt19937_64& shared, int, int) {
                                            return 1 + static_cast<int64_t>(shared() % 512);
                                          });
}

// A peer that never makes the call (W >= 2): rank 0's waits end after the timeout naming the peer;
// the op refuses further calls (fused_peer_timeout.hpp).
TEST(MultiGpuAllGatherGemm, APeerThatNeverArrivesTimesOutNamingIt) {
  WEAVE_REQUIRE_GPUS(2);
  a_peer_that_never_arrives_times_out_naming_it<AgmWorld>({Mode::kSplitLsa, Mode::kSplitCe}, 512, 256, 1024);
}
