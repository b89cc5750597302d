// GemmReduceScatter over real NCCL communicators, through the public API: one rank per visible
// Hopper GPU (world 1 on a one-GPU machine; W over NVLink on a multi-GPU one).
//   - every mode x quant through self_test (every element of every rank's band checked against its
//     closed form); gemm-only, which moves nothing, fails it at W >= 2;
//   - at model sizes (N 7168, K_r 2048, M of whole-tile bands and not), fused and split-ce bitwise
//     equal to split-lsa, every reducing mode (split-nccl too: NCCL's own order) within the bound of
//     an independent reference: each rank's CUDA-core GEMM, reduce-scattered by NCCL in fp32;
//   - a soak of 10,000 calls against split-lsa's bits; a peer that never arrives.
// Elsewhere over NCCL: graph replays (test_fused_graphs.cu), a delayed rank
// (test_fused_delayed_rank.cu), a PDL consumer (test_fused_pdl.cu), the negative controls
// (test_fused_controls_reduce.cu).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/timeout.hpp"
#include "comm_support.hpp"
#include "common/check.hpp"
#include "fused_op_world.hpp"
#include "fused_peer_timeout.hpp"
#include "fused_soak.hpp"
#include "fused_support.hpp"
#include "support/expect_error.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "testing/reduce_reference.hpp"
#include "weave/gemm_reduce_scatter.hpp"

using namespace weave;
using namespace weave::test;
using Mode = GemmReduceScatterMode;

namespace {

const ScaleMode kQuants[] = {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8};

constexpr auto rs_config = &fused_op_config<GemmReduceScatterConfig>;

// M a mode runs at world w: fused's bands are whole tiles (multiples of w x 128).
std::vector<int64_t> ms_for(Mode mode, int w) {
  if (mode == Mode::kFused) return {int64_t(128) * w, int64_t(4096) / (128 * w) * (128 * w)};
  return {int64_t(w), int64_t(33) * w, int64_t(1000 / w * w), int64_t(4096) / w * w};
}

}  // namespace

TEST(MultiGpuGemmReduceScatter, SelfTestEveryModeAndQuant) {
  WEAVE_REQUIRE_GPUS(1);
  const int w = local_world();
  for (ScaleMode q : kQuants)
    for (Mode mode : {Mode::kAuto, Mode::kSplitNccl, Mode::kSplitLsa, Mode::kSplitCe, Mode::kFused}) {
      SCOPED_TRACE(std::string(to_string(q)) + " " + std::string(to_string(mode)) + " W" + std::to_string(w));
      std::string reason;
      for_each_rank([&](Communicator& c) {
        std::string why;
        auto op = make_or_reason<GemmReduceScatter>(c, rs_config(q, mode, 512, 384, 4096), why);
        if (!op) {
          if (c.rank() == 0) reason = why;
          return;
        }
        for (int64_t m : ms_for(mode, w)) {
          const SelfTestReport rep = op->self_test(m);
          EXPECT_TRUE(rep.ok) << "m " << m << ": " << rep.detail;
        }
      });
      if (!reason.empty()) print_not_run("gemm-rs", q, mode, w, reason);
    }
}

TEST(MultiGpuGemmReduceScatter, SelfTestFailsWhenNothingMoves) {
  WEAVE_REQUIRE_GPUS(2);
  for_each_rank([&](Communicator& c) {
    GemmReduceScatter op(c, rs_config(ScaleMode::kBF16, Mode::kGemmOnly, 256, 512, 1024));
    const SelfTestReport rep = op.self_test(200 / c.world_size() * c.world_size());
    EXPECT_FALSE(rep.ok) << rep.detail;
    EXPECT_EQ(rep.wrong_from_rank[c.rank()], 0) << "the own term is computed locally";
  });
}

TEST(MultiGpuGemmReduceScatter, EveryModeEqualsSplitBitwiseAndTheReferenceAtModelSizes) {
  WEAVE_REQUIRE_GPUS(1);
  const int w = local_world();
  const int64_t n = 7168, k = 2048, m_max = 8192;
  const Mode modes[] = {Mode::kFused, Mode::kSplitCe, Mode::kSplitNccl, Mode::kAuto};
  for (ScaleMode q : kQuants) {
    SCOPED_TRACE(std::string(to_string(q)) + " W" + std::to_string(w));
    std::vector<std::string> reasons(std::size(modes));
    for_each_rank([&](Communicator& c) {
      const int r = c.rank(), dev = c.device();
      StreamHolder st;
      GemmReduceScatterConfig lsa_cfg = rs_config(q, Mode::kSplitLsa, n, k, m_max);
      lsa_cfg.mx_route = MxRoute::kNative;  // one kernel for every mode's bits
      GemmReduceScatter split(c, lsa_cfg);
      std::vector<std::unique_ptr<GemmReduceScatter>> ops;
      for (size_t i = 0; i < std::size(modes); ++i) {
        GemmReduceScatterConfig cfg = rs_config(q, modes[i], n, k, m_max);
        cfg.mx_route = MxRoute::kNative;
        std::string why;
        ops.push_back(make_or_reason<GemmReduceScatter>(c, cfg, why));
        if (r == 0) reasons[i] = why;
      }
      const bench::DeviceOperand b = operand(77 + r, n, k, q, ref::Operand::kB, dev);
      for (int64_t m : {int64_t(w), int64_t(128) * w, int64_t(1000 / w * w), int64_t(8192)}) {
        const bench::DeviceOperand a = operand(1000 * m + r, m, k, q, ref::Operand::kA, dev);
        const int64_t rows = m / w;
        const size_t elems = static_cast<size_t>(m * n), band = static_cast<size_t>(rows * n), bytes = band * 2;
        // The reference: this rank's CUDA-core GEMM and its magnitude, each reduce-scattered by NCCL.
        bench::DeviceBuffer sum(band * 4), mag(band * 4), own(elems * 4), term(elems * 4), term_mag(elems * 4);
        const GemmProblem p{.m = m, .n = n, .k = k, .mode = q, .scale_layout = ScaleLayout::kRaw, .out_dtype = DType::kBF16};
        bench::gpu_reference_gemm(p, a.view, b.view, GemmScales{a.scale_view, b.scale_view}, own.as<float>(), st.s);
        // This rank's term and its magnitude (gpu_add_term into zeros), then reduce-scattered.
        WEAVE_CHECK_CUDA(cudaMemsetAsync(term.get(), 0, term.bytes(), st.s));
        WEAVE_CHECK_CUDA(cudaMemsetAsync(term_mag.get(), 0, term_mag.bytes(), st.s));
        bench::gpu_add_term(term.as<float>(), term_mag.as<float>(), own.as<float>(), static_cast<int64_t>(elems), st.s);
        WEAVE_CHECK_NCCL(ncclReduceScatter(term.get(), sum.get(), band, ncclFloat32, ncclSum, c.nccl(), st.s));
        WEAVE_CHECK_NCCL(ncclReduceScatter(term_mag.get(), mag.get(), band, ncclFloat32, ncclSum, c.nccl(), st.s));
        comm::sync_stream_bounded(st.s, c.timeout_s(), "the reference's reduce-scatter (ncclReduceScatter)");
        const std::vector<uint8_t> want = poisoned_call(c, split, m, bytes, a, b, st.s);
        const bench::Tolerance tol = bench::reduced_gemm_tolerance(q, w);
        const ref::Comparison cmp = bench::gpu_compare(split.output(m), sum.as<float>(), tol, st.s, mag.as<float>());
        EXPECT_EQ(cmp.wrong, 0) << "m " << m << " split-lsa: " << cmp.wrong << " of " << cmp.count
                                << " beyond the bound, rel_l2 " << cmp.rel_l2;
        for (size_t i = 0; i < ops.size(); ++i) {
          if (!ops[i] || (modes[i] == Mode::kFused && m % (128 * w) != 0)) continue;
          const std::vector<uint8_t> got = poisoned_call(c, *ops[i], m, bytes, a, b, st.s);
          if (ops[i]->last_mode() == Mode::kSplitNccl) {  // NCCL's order: the bound, not the bits
            const ref::Comparison nc = bench::gpu_compare(ops[i]->output(m), sum.as<float>(), tol, st.s, mag.as<float>());
            EXPECT_EQ(nc.wrong, 0) << "m " << m << " split-nccl: " << nc.wrong << " beyond the bound";
            continue;
          }
          EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0)
              << "m " << m << ": " << to_string(modes[i]) << " (ran " << to_string(ops[i]->last_mode())
              << ") differs from split-lsa";
        }
        if (r == 0 && m == 8192)
          std::printf("  %s W%d m %lld: split-lsa rel_l2 %.3g vs the NCCL reduce-scattered reference\n",
                      std::string(to_string(q)).c_str(), w, static_cast<long long>(m), cmp.rel_l2);
      }
    });
    for (size_t i = 0; i < std::size(modes); ++i)
      if (!reasons[i].empty()) print_not_run("gemm-rs", q, modes[i], w, reasons[i]);
  }
}

// 10,000 calls of random M (multiples of W; half the variants of W x 128: whole-tile bands) over
// every mode (fused only where its bands are whole tiles; split-nccl's NCCL order held to the
// reference's bound and then to its own bits), each band NaN-poisoned first and compared bit for
// bit with the mode's quiet output of its variant (fused_soak.hpp); now and then one rank is late.
TEST(MultiGpuGemmReduceScatter, RandomisedSoakAgainstSplit) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t m_max = 1024 / local_world() * local_world();
  randomised_soak_against_split<RsWorld>(
      {Mode::kSplitLsa, Mode::kFused, Mode::kSplitCe, Mode::kSplitNccl, Mode::kAuto}, 256, 256, m_max,
      [m_max](std::mt19937_64& shared, int v, int w) {
        const int64_t unit = v % 2 == 0 ? int64_t(128) * w : w;
        return unit * (1 + static_cast<int64_t>(shared() % (m_max / unit)));
      });
}

// A peer that never makes the call (W >= 2): rank 0's waits end after the timeout naming the peer;
// the op refuses further calls (fused_peer_timeout.hpp).
TEST(MultiGpuGemmReduceScatter, APeerThatNeverArrivesTimesOutNamingIt) {
  WEAVE_REQUIRE_GPUS(2);
  a_peer_that_never_arrives_times_out_naming_it<RsWorld>({Mode::kFused, Mode::kSplitLsa, Mode::kSplitCe}, 512, 256,
                                                         1024 * local_world());
}
