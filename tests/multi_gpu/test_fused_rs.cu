// GemmReduceScatter over real NCCL communicators, through the public API: one rank per visible
// Hopper GPU (world 1 on a one-GPU machine; W over NVLink on a multi-GPU one).
//   - every mode x quant through self_test (every element of every rank's band checked against its
//     closed form); gemm-only, which moves nothing, fails it at W >= 2;
//   - at model sizes (N 7168, K_r 2048, M of whole-tile bands and not), fused and split-ce bitwise
//     equal to split-lsa, every reducing mode (split-nccl too: NCCL's own order) within the bound of
//     an independent reference: each rank's CUDA-core GEMM, reduce-scattered by NCCL in fp32;
//   - a soak of 10,000 calls against split-lsa's bits; a peer that never arrives.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/timeout.hpp"
#include "comm_support.hpp"
#include "common/check.hpp"
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

// 10,000 calls of random M (multiples of W; some of W x 128) over fused, split-ce and auto (the same
// pick on every rank; fused only where its bands are whole tiles), each band NaN-poisoned first and
// compared bit for bit with split-lsa's output of the same inputs; now and then one rank is late.
TEST(MultiGpuGemmReduceScatter, RandomisedSoakAgainstSplit) {
  WEAVE_REQUIRE_GPUS(1);
  const int w = local_world();
  const int64_t n = 256, k = 256, m_max = 1024 / w * w;
  constexpr int kCalls = 10000, kVariants = 8;
  std::vector<long long> differing(w, 0), calls_made(w, 0);
  for_each_rank([&](Communicator& c) {
    const int r = c.rank(), dev = c.device();
    StreamHolder st;
    GemmReduceScatter split(c, rs_config(ScaleMode::kBF16, Mode::kSplitLsa, n, k, m_max));
    std::vector<std::unique_ptr<GemmReduceScatter>> ops;
    for (Mode mode : {Mode::kFused, Mode::kSplitCe, Mode::kAuto}) {
      std::string why;
      auto op = make_or_reason<GemmReduceScatter>(c, rs_config(ScaleMode::kBF16, mode, n, k, m_max), why);
      if (op) ops.push_back(std::move(op));
    }
    ASSERT_FALSE(ops.empty());
    const bench::DeviceOperand b = operand(91 + r, n, k, ScaleMode::kBF16, ref::Operand::kB, dev);
    std::mt19937_64 shared(20261205);
    std::vector<bench::DeviceOperand> as;
    std::vector<int64_t> ms;
    std::vector<bench::DeviceBuffer> want;
    for (int v = 0; v < kVariants; ++v) {
      const int64_t unit = v % 2 == 0 ? int64_t(128) * w : w;
      const int64_t m = unit * (1 + static_cast<int64_t>(shared() % (m_max / unit)));
      ms.push_back(m);
      as.push_back(operand(5000 + 97 * v + r, m, k, ScaleMode::kBF16, ref::Operand::kA, dev));
      const size_t bytes = static_cast<size_t>(m / w * n) * 2;
      (void)poisoned_call(c, split, m, bytes, as.back(), b, st.s);
      want.emplace_back(bytes);
      WEAVE_CHECK_CUDA(cudaMemcpy(want.back().get(), split.output(m).data, bytes, cudaMemcpyDeviceToDevice));
    }
    c.barrier();
    for (int i = 0; i < kCalls; ++i) {
      const int v = static_cast<int>(shared() % kVariants);
      size_t o = shared() % ops.size();
      const int64_t m = ms[v];
      if (ops[o]->config().mode == Mode::kFused && m % (128 * w) != 0) o = (o + 1) % ops.size();
      GemmReduceScatter& op = *ops[o];
      const bool late = static_cast<int>(shared() % w) == r && i % 7 == 0;
      const size_t elems = static_cast<size_t>(m / w * n);
      bench::poison_nan(op.output(m).data, elems * 2, DType::kBF16, st.s);
      if (late) spin_delay(20'000, st.s);
      op.run(m, as[v].view, b.view, {}, st.s);
      ++calls_made[r];
      differing[r] += bench::gpu_count_differing(op.output(m).data, want[v].get(), elems, DType::kBF16, st.s);
      op.check();
    }
    c.barrier();
  });
  for (int r = 0; r < w; ++r) {
    EXPECT_EQ(calls_made[r], kCalls) << "rank " << r;
    EXPECT_EQ(differing[r], 0) << "rank " << r << ": elements that differ from split-lsa";
  }
  std::printf("  soak: %d calls at W%d over fused / split-ce / auto, every band compared: %lld differing\n", kCalls, w,
              differing[0]);
}

// A peer that never makes the call (W >= 2): rank 0's waits end after the timeout naming the peer;
// the op refuses further calls; the others wait on a host flag, then every rank destroys its op.
TEST(MultiGpuGemmReduceScatter, APeerThatNeverArrivesTimesOutNamingIt) {
  WEAVE_REQUIRE_GPUS(2);
  for (Mode mode : {Mode::kFused, Mode::kSplitLsa}) {
    SCOPED_TRACE(std::string(to_string(mode)));
    std::atomic<bool> rank0_done{false};
    for_each_rank([&](Communicator& c) {
      const int64_t m = 1024 * c.world_size();
      GemmReduceScatter op(c, rs_config(ScaleMode::kBF16, mode, 512, 256, m));
      const bench::DeviceOperand a = operand(5 + c.rank(), m, 256, ScaleMode::kBF16, ref::Operand::kA, c.device());
      const bench::DeviceOperand b = operand(9 + c.rank(), 512, 256, ScaleMode::kBF16, ref::Operand::kB, c.device());
      expect_rank0_alone_times_out(c, op, rank0_done, std::string(to_string(mode)),
                                   [&](cudaStream_t s) { op.run(m, a.view, b.view, {}, s); });
    });
  }
}
