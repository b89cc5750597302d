// GemmAllReduce and GemmAllGather over real NCCL communicators, through the public API: one rank per
// visible Hopper GPU (world 1 on a one-GPU machine, where split-nccl runs over a one-rank NCCL
// communicator; W on a multi-GPU one, over NVLink). Issue 37 item 3, first part:
//   - every mode x quant through self_test (known per-rank values, every element checked on every
//     rank); gemm-only, which moves nothing, must fail it at W >= 2 (the self-test's teeth);
//   - at model sizes (N 7168, K_r 2048, M 1 / 128 / 1000 / 8192, random operands per rank), every
//     mode bitwise equal to split-lsa's output of the same inputs (those that sum in another order,
//     decode's GEMV and split-nccl's ring past two ranks, within the bound instead) and within the
//     bound of an independent reference: each rank's CUDA-core GEMM of its own shard, summed over
//     ranks by NCCL (all-reduce) or gathered by NCCL (all-gather), not by weave. Outputs
//     NaN-poisoned before every call;
//   - a randomised soak of 10,000 calls over every mode (fused_soak.hpp), a peer that never arrives
//     (fused_peer_timeout.hpp) and fused-ce with every stream on one hardware queue
//     (fused_one_queue.hpp).
// Elsewhere over NCCL: graph replays (test_fused_graphs.cu), a delayed rank
// (test_fused_delayed_rank.cu), a PDL consumer (test_fused_pdl.cu), the negative controls
// (test_fused_controls_*.cu).
// A mode that cannot run at this world (kUnavailable, e.g. the copy-engine modes without peers) is
// printed with its reason, never silently passed.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm_support.hpp"
#include "fused_one_queue.hpp"
#include "fused_op_world.hpp"
#include "fused_peer_timeout.hpp"
#include "fused_soak.hpp"
#include "fused_support.hpp"
#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "support/expect_error.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "testing/reduce_reference.hpp"
#include "weave/gemm_all_gather.hpp"
#include "weave/gemm_all_reduce.hpp"
#include "weave/quant.hpp"

using namespace weave;
using namespace weave::test;

namespace {

const ScaleMode kQuants[] = {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8};

constexpr auto ar_config = &fused_op_config<GemmAllReduceConfig>;
constexpr auto ag_config = &fused_op_config<GemmAllGatherConfig>;  // bf16 output

}  // namespace

TEST(MultiGpuGemmAllReduce, SelfTestEveryModeAndQuant) {
  WEAVE_REQUIRE_GPUS(1);
  const int w = local_world();
  const GemmAllReduceMode modes[] = {GemmAllReduceMode::kAuto,     GemmAllReduceMode::kSplitNccl,
                                     GemmAllReduceMode::kSplitLsa, GemmAllReduceMode::kSplitCe,
                                     GemmAllReduceMode::kFused,    GemmAllReduceMode::kFusedRs,
                                     GemmAllReduceMode::kFusedCe,  GemmAllReduceMode::kDecode,
                                     GemmAllReduceMode::kDecodeFused};
  for (ScaleMode q : kQuants)
    for (GemmAllReduceMode mode : modes) {
      SCOPED_TRACE(std::string(to_string(q)) + " " + std::string(to_string(mode)) + " W" + std::to_string(w));
      std::string reason;
      for_each_rank([&](Communicator& c) {
        std::string why;
        auto op = make_or_reason<GemmAllReduce>(c, ar_config(q, mode, 512, 384, 4100), why);
        if (!op) {
          if (c.rank() == 0) reason = why;
          return;
        }
        for (int64_t m : {1, 33, 1000, 4096}) {
          if (!ArWorld::runs(mode, w, m)) continue;
          const SelfTestReport rep = op->self_test(m);
          EXPECT_TRUE(rep.ok) << "m " << m << ": " << rep.detail;
        }
      });
      if (!reason.empty())
        print_not_run("gemm-ar", q, mode, w, reason);
    }
}

// decode-fused (the decode GEMV and the LL all-reduce in one kernel) bitwise equal to decode over
// the real windows, at a model layer (N 7168, K_r 2048) and every M bucket of the GEMV, in every raw
// quant; at world 1 both run the GEMV alone.
TEST(MultiGpuGemmAllReduce, DecodeFusedEqualsDecodeBitwiseAtModelSizes) {
  WEAVE_REQUIRE_GPUS(1);
  const int w = local_world();
  const int64_t n = 7168, k = 2048, m_max = 32;
  for (ScaleMode q : kQuants) {
    SCOPED_TRACE(std::string(to_string(q)) + " W" + std::to_string(w));
    std::string reason;
    for_each_rank([&](Communicator& c) {
      const int r = c.rank(), dev = c.device();
      StreamHolder st;
      std::string why;
      auto fused = make_or_reason<GemmAllReduce>(c, ar_config(q, GemmAllReduceMode::kDecodeFused, n, k, m_max), why);
      if (!fused) {
        if (r == 0) reason = why;
        return;
      }
      GemmAllReduce decode(c, ar_config(q, GemmAllReduceMode::kDecode, n, k, m_max));
      const bench::DeviceOperand b = operand(91 + r, n, k, q, ref::Operand::kB, dev);
      for (int64_t m : {int64_t{1}, int64_t{8}, int64_t{13}, int64_t{32}}) {
        const bench::DeviceOperand a = operand(300 * m + r, m, k, q, ref::Operand::kA, dev);
        const size_t bytes = static_cast<size_t>(m * n) * 2;
        const std::vector<uint8_t> want = poisoned_call(c, decode, m, bytes, a, b, st.s);
        const std::vector<uint8_t> got = poisoned_call(c, *fused, m, bytes, a, b, st.s);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << "m " << m << ": decode-fused differs from decode";
        EXPECT_EQ(fused->last_mode(), w > 1 ? GemmAllReduceMode::kDecodeFused : GemmAllReduceMode::kDecode);
      }
    });
    if (!reason.empty()) print_not_run("gemm-ar", q, GemmAllReduceMode::kDecodeFused, w, reason);
  }
}

// The self-test has teeth where there are peers: gemm-only moves nothing.
TEST(MultiGpuGemmAllReduce, SelfTestFailsWhenNothingMoves) {
  WEAVE_REQUIRE_GPUS(2);
  for_each_rank([&](Communicator& c) {
    GemmAllReduce op(c, ar_config(ScaleMode::kBF16, GemmAllReduceMode::kGemmOnly, 256, 512, 256));
    const SelfTestReport rep = op.self_test(200);
    EXPECT_FALSE(rep.ok) << rep.detail;
    EXPECT_EQ(rep.wrong_from_rank[c.rank()], 0) << "the own term is computed locally";
  });
}

// Model size: every reducing mode bitwise equal to split-lsa's output and within the bound of the
// NCCL-summed reference.
TEST(MultiGpuGemmAllReduce, EveryModeEqualsSplitBitwiseAndTheReferenceAtModelSizes) {
  WEAVE_REQUIRE_GPUS(1);
  const int w = local_world();
  const int64_t n = 7168, k = 2048, m_max = 8192;
  const GemmAllReduceMode modes[] = {GemmAllReduceMode::kFused, GemmAllReduceMode::kFusedRs,
                                     GemmAllReduceMode::kFusedCe, GemmAllReduceMode::kSplitNccl,
                                     GemmAllReduceMode::kSplitCe, GemmAllReduceMode::kAuto};
  for (ScaleMode q : kQuants) {
    SCOPED_TRACE(std::string(to_string(q)) + " W" + std::to_string(w));
    std::vector<std::string> reasons(std::size(modes));
    for_each_rank([&](Communicator& c) {
      const int r = c.rank(), dev = c.device();
      StreamHolder st;
      GemmAllReduce split(c, ar_config(q, GemmAllReduceMode::kSplitLsa, n, k, m_max));
      std::vector<std::unique_ptr<GemmAllReduce>> ops;
      for (size_t i = 0; i < std::size(modes); ++i) {
        GemmAllReduceConfig cfg = ar_config(q, modes[i], n, k, m_max);
        // fused-ce runs mxfp8's native kernel; the bf16 route would differ from split-lsa's bits.
        if (q == ScaleMode::kMxfp8) cfg.mx_route = MxRoute::kNative;
        std::string why;
        ops.push_back(make_or_reason<GemmAllReduce>(c, cfg, why));
        if (r == 0) reasons[i] = why;
      }
      GemmAllReduceConfig native = ar_config(q, GemmAllReduceMode::kSplitLsa, n, k, m_max);
      native.mx_route = MxRoute::kNative;
      GemmAllReduce split_native(c, native);
      const bench::DeviceOperand b = operand(77 + r, n, k, q, ref::Operand::kB, dev);
      for (int64_t m : {int64_t{1}, int64_t{128}, int64_t{1000}, int64_t{8192}}) {
        const bench::DeviceOperand a = operand(1000 * m + r, m, k, q, ref::Operand::kA, dev);
        const size_t elems = static_cast<size_t>(m * n), bytes = elems * 2;
        // The reference: this rank's CUDA-core GEMM, its magnitude, each summed over ranks by NCCL.
        bench::DeviceBuffer sum(elems * 4), mag(elems * 4), own(elems * 4);
        const GemmProblem p{.m = m, .n = n, .k = k, .mode = q, .scale_layout = ScaleLayout::kRaw, .out_dtype = DType::kBF16};
        bench::gpu_reference_gemm(p, a.view, b.view, GemmScales{a.scale_view, b.scale_view}, own.as<float>(), st.s);
        WEAVE_CHECK_CUDA(cudaMemsetAsync(sum.get(), 0, sum.bytes(), st.s));
        WEAVE_CHECK_CUDA(cudaMemsetAsync(mag.get(), 0, mag.bytes(), st.s));
        bench::gpu_add_term(sum.as<float>(), mag.as<float>(), own.as<float>(), static_cast<int64_t>(elems), st.s);
        WEAVE_CHECK_NCCL(ncclAllReduce(sum.get(), sum.get(), elems, ncclFloat32, ncclSum, c.nccl(), st.s));
        WEAVE_CHECK_NCCL(ncclAllReduce(mag.get(), mag.get(), elems, ncclFloat32, ncclSum, c.nccl(), st.s));
        comm::sync_stream_bounded(st.s, c.timeout_s(), "the reference's sum over ranks (ncclAllReduce)");
        const std::vector<uint8_t> want_bits = poisoned_call(c, split, m, bytes, a, b, st.s);
        const std::vector<uint8_t> want_native =
            q == ScaleMode::kMxfp8 ? poisoned_call(c, split_native, m, bytes, a, b, st.s) : want_bits;
        const bench::Tolerance tol = bench::reduced_gemm_tolerance(q, w);
        const ref::Comparison cmp =
            bench::gpu_compare(split.output(m), sum.as<float>(), tol, st.s, mag.as<float>());
        EXPECT_EQ(cmp.wrong, 0) << "m " << m << " split-lsa: " << cmp.wrong << " of " << cmp.count
                                << " beyond the bound, rel_l2 " << cmp.rel_l2;
        for (size_t i = 0; i < ops.size(); ++i) {
          if (!ops[i]) continue;
          const std::vector<uint8_t> got = poisoned_call(c, *ops[i], m, bytes, a, b, st.s);
          const GemmAllReduceMode ran = ops[i]->last_mode();
          if (!ArWorld::bitwise_to_split(ran, w)) {  // decode's GEMV, or NCCL's ring past 2 ranks: the bound
            const ref::Comparison other =
                bench::gpu_compare(ops[i]->output(m), sum.as<float>(), tol, st.s, mag.as<float>());
            EXPECT_EQ(other.wrong, 0) << "m " << m << ": " << to_string(modes[i]) << " (ran " << to_string(ran)
                                      << "): " << other.wrong << " of " << other.count << " beyond the bound";
            continue;
          }
          const bool native_kernel = q == ScaleMode::kMxfp8;
          EXPECT_EQ(std::memcmp(got.data(), (native_kernel ? want_native : want_bits).data(), bytes), 0)
              << "m " << m << ": " << to_string(modes[i]) << " (ran " << to_string(ran) << ") differs from split-lsa";
        }
        if (r == 0 && (m == 1000 || m == 8192))
          std::printf("  %s W%d m %lld: split-lsa rel_l2 %.3g vs the NCCL-summed reference\n",
                      std::string(to_string(q)).c_str(), w, static_cast<long long>(m), cmp.rel_l2);
      }
    });
    for (size_t i = 0; i < std::size(modes); ++i)
      if (!reasons[i].empty())
        print_not_run("gemm-ar", q, modes[i], w, reasons[i]);
  }
}

TEST(MultiGpuGemmAllGather, SelfTestEveryModeAndQuant) {
  WEAVE_REQUIRE_GPUS(1);
  const int w = local_world();
  const GemmAllGatherMode modes[] = {GemmAllGatherMode::kAuto,     GemmAllGatherMode::kSplitNccl,
                                     GemmAllGatherMode::kSplitLsa, GemmAllGatherMode::kSplitCe,
                                     GemmAllGatherMode::kFusedLsa, GemmAllGatherMode::kFusedCe};
  for (ScaleMode q : kQuants)
    for (GemmAllGatherMode mode : modes) {
      SCOPED_TRACE(std::string(to_string(q)) + " " + std::string(to_string(mode)) + " W" + std::to_string(w));
      std::string reason;
      for_each_rank([&](Communicator& c) {
        std::string why;
        auto op = make_or_reason<GemmAllGather>(c, ag_config(q, mode, 256, 512, 1100), why);
        if (!op) {
          if (c.rank() == 0) reason = why;
          return;
        }
        for (int64_t m : {1, 33, 1000}) {
          const SelfTestReport rep = op->self_test(m);
          EXPECT_TRUE(rep.ok) << "m " << m << ": " << rep.detail;
        }
      });
      if (!reason.empty())
        print_not_run("gemm-ag", q, mode, w, reason);
    }
}

// Model size: rank s's rows [s*m, (s+1)*m) of the output equal A_s B^T (B identical on every rank);
// every mode bitwise equal to split-lsa's output and within the bound of the reference gathered
// by NCCL.
TEST(MultiGpuGemmAllGather, EveryModeEqualsSplitBitwiseAndTheReferenceAtModelSizes) {
  WEAVE_REQUIRE_GPUS(1);
  const int w = local_world();
  const int64_t n = 7168, k = 2048, m_max = 8192 / w;
  const GemmAllGatherMode modes[] = {GemmAllGatherMode::kFusedLsa, GemmAllGatherMode::kFusedCe,
                                     GemmAllGatherMode::kSplitNccl, GemmAllGatherMode::kSplitCe,
                                     GemmAllGatherMode::kAuto};
  for (ScaleMode q : kQuants) {
    SCOPED_TRACE(std::string(to_string(q)) + " W" + std::to_string(w));
    std::vector<std::string> reasons(std::size(modes));
    for_each_rank([&](Communicator& c) {
      const int r = c.rank(), dev = c.device();
      StreamHolder st;
      GemmAllGatherConfig scfg = ag_config(q, GemmAllGatherMode::kSplitLsa, n, k, m_max);
      scfg.mx_route = MxRoute::kNative;
      GemmAllGather split(c, scfg);
      std::vector<std::unique_ptr<GemmAllGather>> ops;
      for (size_t i = 0; i < std::size(modes); ++i) {
        GemmAllGatherConfig cfg = ag_config(q, modes[i], n, k, m_max);
        cfg.mx_route = MxRoute::kNative;
        std::string why;
        ops.push_back(make_or_reason<GemmAllGather>(c, cfg, why));
        if (r == 0) reasons[i] = why;
      }
      const bench::DeviceOperand b = operand(77, n, k, q, ref::Operand::kB, dev);  // the same B everywhere
      for (int64_t m : {int64_t{1}, int64_t{128}, int64_t{1000} / w, m_max}) {
        const bench::DeviceOperand a = operand(1000 * m + r, m, k, q, ref::Operand::kA, dev);
        const size_t own_elems = static_cast<size_t>(m * n), bytes = own_elems * 2 * static_cast<size_t>(w);
        bench::DeviceBuffer own(own_elems * 4), all(own_elems * 4 * static_cast<size_t>(w));
        const GemmProblem p{.m = m, .n = n, .k = k, .mode = q, .scale_layout = ScaleLayout::kRaw, .out_dtype = DType::kBF16};
        bench::gpu_reference_gemm(p, a.view, b.view, GemmScales{a.scale_view, b.scale_view}, own.as<float>(), st.s);
        WEAVE_CHECK_NCCL(ncclAllGather(own.get(), all.get(), own_elems, ncclFloat32, c.nccl(), st.s));
        comm::sync_stream_bounded(st.s, c.timeout_s(), "the reference rows of every rank (ncclAllGather)");
        const std::vector<uint8_t> want = poisoned_call(c, split, m, bytes, a, b, st.s);
        const ref::Comparison cmp = bench::gpu_compare(split.output(m), all.as<float>(),
                                                       bench::gemm_tolerance(q, DType::kBF16), st.s);
        EXPECT_EQ(cmp.wrong, 0) << "m " << m << " split-lsa: " << cmp.wrong << " of " << cmp.count
                                << " beyond the bound, rel_l2 " << cmp.rel_l2;
        // Where split runs weave::Gemm's GEMV or K split (small m, long K), the fused modes, which
        // run the op's tile, sum in another order: the reference bound instead of split's bits.
        const GemmAllGatherPlan sp = split.plan(m);
        const bool split_leg = sp.gemm_gemv || sp.gemm_split_k > 1;
        for (size_t i = 0; i < ops.size(); ++i) {
          if (!ops[i]) continue;
          const std::vector<uint8_t> got = poisoned_call(c, *ops[i], m, bytes, a, b, st.s);
          const GemmAllGatherMode ran = ops[i]->last_mode();
          if (split_leg && (ran == GemmAllGatherMode::kFusedLsa || ran == GemmAllGatherMode::kFusedCe)) {
            const ref::Comparison fc = bench::gpu_compare(ops[i]->output(m), all.as<float>(),
                                                          bench::gemm_tolerance(q, DType::kBF16), st.s);
            EXPECT_EQ(fc.wrong, 0) << "m " << m << ": " << to_string(modes[i]) << " " << fc.wrong << " of " << fc.count
                                   << " beyond the bound (split: " << sp.reason << ")";
            continue;
          }
          EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0)
              << "m " << m << ": " << to_string(modes[i]) << " (ran " << to_string(ran) << ") differs from split-lsa";
        }
        if (r == 0 && m == m_max)
          std::printf("  %s W%d m %lld per rank: split-lsa rel_l2 %.3g vs the NCCL-gathered reference\n",
                      std::string(to_string(q)).c_str(), w, static_cast<long long>(m), cmp.rel_l2);
      }
    });
    for (size_t i = 0; i < std::size(modes); ++i)
      if (!reasons[i].empty())
        print_not_run("gemm-ag", q, modes[i], w, reasons[i]);
  }
}

namespace {

// The soak's M: two variants of a decode batch (decode, and auto, take them), the rest up to m_max.
SoakDraw small_then_any(int64_t m_max) {
  return [m_max](std::mt19937_64& shared, int v, int) {
    return 1 + static_cast<int64_t>(shared() % (v < 2 ? 32 : m_max));
  };
}

}  // namespace

// >= 10,000 calls over every mode (split-nccl and decode included), each output compared bit for
// bit with the mode's quiet output of its variant, held to split-lsa's (fused_soak.hpp); now and
// then one rank is late. World 1 here; at W >= 2 the NVLink protocol.
TEST(MultiGpuGemmAllReduce, RandomisedSoakAgainstSplit) {
  WEAVE_REQUIRE_GPUS(1);
  using Mode = GemmAllReduceMode;
  randomised_soak_against_split<ArWorld>({Mode::kSplitLsa, Mode::kFused, Mode::kFusedRs, Mode::kFusedCe,
                                          Mode::kSplitCe, Mode::kSplitNccl, Mode::kDecode, Mode::kDecodeFused,
                                          Mode::kAuto},
                                         256, 256, 600, small_then_any(600));
}

TEST(MultiGpuGemmAllGather, RandomisedSoakAgainstSplit) {
  WEAVE_REQUIRE_GPUS(1);
  using Mode = GemmAllGatherMode;
  randomised_soak_against_split<AgWorld>(
      {Mode::kSplitLsa, Mode::kFusedLsa, Mode::kFusedCe, Mode::kSplitCe, Mode::kSplitNccl, Mode::kAuto}, 256, 256, 512,
      small_then_any(512));
}

// A peer that never makes the call (W >= 2): rank 0's waits end after the communicator's timeout
// with an error naming the peer, the kernel completes, and the op refuses further calls
// (fused_peer_timeout.hpp). Every bounded mode; decode at a decode batch.
TEST(MultiGpuGemmAllReduce, APeerThatNeverArrivesTimesOutNamingIt) {
  WEAVE_REQUIRE_GPUS(2);
  using Mode = GemmAllReduceMode;
  a_peer_that_never_arrives_times_out_naming_it<ArWorld>(
      {Mode::kFused, Mode::kFusedRs, Mode::kFusedCe, Mode::kSplitLsa, Mode::kSplitCe}, 512, 256, 1024);
  a_peer_that_never_arrives_times_out_naming_it<ArWorld>({Mode::kDecode, Mode::kDecodeFused}, 512, 256, 16);
}

TEST(MultiGpuGemmAllGather, APeerThatNeverArrivesTimesOutNamingIt) {
  WEAVE_REQUIRE_GPUS(2);
  using Mode = GemmAllGatherMode;
  a_peer_that_never_arrives_times_out_naming_it<AgWorld>(
      {Mode::kFusedLsa, Mode::kFusedCe, Mode::kSplitLsa, Mode::kSplitCe}, 256, 256, 256);
}

// Issue 36 item 4 on separate GPUs: fused-ce at W >= 3 with every stream of a process on one
// hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-style overlap sets it). GemmAllReduce's
// pulls are enqueued round by round, so a copy that waits for a peer's chunk never sits ahead of
// one that chunk needs; enqueued stream by stream, the calls deadlocked until the timeout (the CPU
// pull simulation's merged-queue mode shows both: FusedArPull.*). fused_one_queue.hpp: 50 calls of
// changing M, each bitwise equal to split-lsa's; scripts/gpu_all.sh (multi) runs these in a process
// of their own with the variable set; elsewhere they skip.
TEST(MultiGpuGemmAllReduce, FusedCeOnOneHardwareQueueFinishesAndEqualsSplit) {
  WEAVE_REQUIRE_GPUS(3);
  if (const std::string why = one_hardware_queue_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  fused_ce_on_one_hardware_queue<ArWorld>(GemmAllReduceMode::kFusedCe, 2048, 1024, 2048);
}

TEST(MultiGpuGemmAllGather, FusedCeOnOneHardwareQueueFinishesAndEqualsSplit) {
  WEAVE_REQUIRE_GPUS(3);
  if (const std::string why = one_hardware_queue_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  fused_ce_on_one_hardware_queue<AgWorld>(GemmAllGatherMode::kFusedCe, 2048, 1024, 1024);
}
