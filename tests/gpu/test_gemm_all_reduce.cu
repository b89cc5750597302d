// GemmAllReduce in the emulated world (testing/emulated_world.hpp: W ranks as threads on one
// GPU, the same op code and kernels as over NCCL): every mode x quant x W through self_test, fused
// bitwise equal to split-lsa and the sum within tolerance of a reference that is not weave's
// kernel, identical on every rank; negative controls for the partial wait, the chunk election,
// the arrival wait and the credit; back-to-back calls of changing M with a slow rank; graph
// replays across the epoch wrap; a peer that never arrives; a randomised soak; bad inputs. The
// same op runs over NCCL windows on 2+ GPUs in the runs-on-2-GPUs issue.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <unistd.h>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/hash.hpp"
#include "fused/all_reduce/impl.hpp"
#include "fused_test_support.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "testing/reduce_reference.hpp"
#include "testing/spin_delay.hpp"
#include "weave/quant.hpp"

using namespace weave;
using test::fits_queues;
using test::mode_name;
using test::Stream;

namespace {

struct QuantCase {
  ScaleMode quant;
  ScaleLayout layout;
  const char* name;
};
const QuantCase kQuants[] = {
    {ScaleMode::kBF16, ScaleLayout::kRaw, "bf16"},
    {ScaleMode::kPtpc, ScaleLayout::kRaw, "ptpc"},
    {ScaleMode::kBlockscale, ScaleLayout::kRaw, "blockscale"},
    {ScaleMode::kMxfp8, ScaleLayout::kRaw, "mxfp8-raw"},
    {ScaleMode::kMxfp8, ScaleLayout::kPacked, "mxfp8-packed"},
    {ScaleMode::kBlockscale, ScaleLayout::kMnMajor, "blockscale-mn"},
};

GemmAllReduceConfig config_of(const QuantCase& q, GemmAllReduceMode mode, int64_t n, int64_t k, int64_t m_max) {
  GemmAllReduceConfig c;
  c.n = n;
  c.k = k;
  c.m_max = m_max;
  c.quant = q.quant;
  c.scale_layout = q.layout;
  c.mode = mode;
  return c;
}

// --- one-hot operands with closed-form outputs (bf16), for protocol tests ---
// Rank s's A row i is one-hot at col(seed, s, i); rank s's B_s[n, k] = small integers hashed with
// s. Then out[i, j] = sum_s B_s[j, col(seed, s, i)] exactly (|sum| <= 64).
int col_of(uint64_t seed, int s, int64_t i, int64_t k) { return static_cast<int>(mix64(seed * 7919 + s * 1000003ull + i) % k); }
float b_val(int s, int64_t row, int64_t kk) {
  return static_cast<float>(static_cast<int>(mix64((uint64_t(s + 1) << 50) ^ (row << 20) ^ kk) % 17) - 8);
}


struct OneHot {
  int64_t m_max, n, k;
  int rank;
  bench::DeviceBuffer b;  // [n, k] bf16: this rank's B_r
  bench::DeviceBuffer a;  // [m_max, k] bf16 (this rank's current A)
  OneHot(int64_t m_max_, int64_t n_, int64_t k_, int rank_)
      : m_max(m_max_), n(n_), k(k_), rank(rank_), b(n_ * k_ * 2), a(m_max_ * k_ * 2) {
    std::vector<uint16_t> hb(n * k);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) hb[r * k + c] = ref::float_to_bf16(b_val(rank, r, c));
    b.upload(hb.data(), hb.size() * 2);
  }
  std::vector<uint16_t> host_a(uint64_t seed, int64_t m) const {
    std::vector<uint16_t> ha(m_max * k, 0);
    const uint16_t one = ref::float_to_bf16(1.0f);
    for (int64_t i = 0; i < m; ++i) ha[i * k + col_of(seed, rank, i, k)] = one;
    return ha;
  }
  void set_a(uint64_t seed, int64_t m) {
    const auto ha = host_a(seed, m);
    a.upload(ha.data(), ha.size() * 2);
  }
  TensorView a_view(int64_t m, int dev) const { return TensorView::matrix(a.get(), DType::kBF16, m, k, dev); }
  TensorView b_view(int dev) const { return TensorView::matrix(b.get(), DType::kBF16, n, k, dev); }
  // The expected output [m, n] as bf16 bits (exact); ptpc: each rank's term times its row scale
  // (PtpcOneHot: powers of two, so still exact, |sum| <= 64 in steps of 1/2).
  std::vector<uint16_t> expected(uint64_t seed, int world, int64_t m, bool ptpc = false) const {
    std::vector<uint16_t> e(m * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float v = 0;
        for (int s = 0; s < world; ++s)
          v += (ptpc ? test::ptpc_row_scale(s, i) : 1.0f) * b_val(s, j, col_of(seed, s, i, k));
        e[i * n + j] = ref::float_to_bf16(v);
      }
    return e;
  }
  int64_t wrong(const std::vector<uint16_t>& out, uint64_t seed, int world, int64_t m) const {
    const auto e = expected(seed, world, m);
    int64_t bad = 0;
    for (size_t i = 0; i < e.size(); ++i) bad += out[i] != e[i];
    return bad;
  }
};


__global__ void count_diff_kernel(const uint16_t* out, const uint16_t* want, int64_t elems, unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < elems; e += int64_t(gridDim.x) * blockDim.x)
    bad += out[e] != want[e];
  if (bad) atomicAdd(wrong, bad);
}


// Every source rank's A_s [m, k] (seed_base + 17 s + m), quantised per q: each rank regenerates all
// of them, for the summed reference.
std::vector<bench::DeviceOperand> upload_every_a(int world, uint64_t seed_base, int64_t m, int64_t k, const QuantCase& q,
                                                 int dev) {
  std::vector<bench::DeviceOperand> as;
  for (int s = 0; s < world; ++s)
    as.push_back(bench::upload_operand(
        bench::quantize_parallel(bench::random_operand(seed_base + 17 * s + m, m, k), m, k, q.quant, ref::Operand::kA),
        dev));
  return as;
}

// The sum over source ranks of gpu_reference_gemm(A_s, B_s) (a plain CUDA-core GEMM, not weave's
// kernel) and of the terms' magnitudes (testing/reduce_reference.hpp bounds a sum whose terms cancel).
struct SummedReference {
  bench::DeviceBuffer sum, mag;
  SummedReference(const std::vector<bench::DeviceOperand>& as, const std::vector<bench::DeviceOperand>& bs,
                  const GemmProblem& p, cudaStream_t st)
      : sum(static_cast<size_t>(p.m * p.n) * 4), mag(static_cast<size_t>(p.m * p.n) * 4) {
    bench::DeviceBuffer one(static_cast<size_t>(p.m * p.n) * 4);
    WEAVE_CHECK_CUDA(cudaMemsetAsync(sum.get(), 0, sum.bytes(), st));
    WEAVE_CHECK_CUDA(cudaMemsetAsync(mag.get(), 0, mag.bytes(), st));
    for (size_t s = 0; s < as.size(); ++s) {
      bench::gpu_reference_gemm(p, as[s].view, bs[s].view, GemmScales{as[s].scale_view, bs[s].scale_view},
                                one.as<float>(), st);
      bench::gpu_add_term(sum.as<float>(), mag.as<float>(), one.as<float>(), p.m * p.n, st);
    }
    WEAVE_CHECK_CUDA(cudaStreamSynchronize(st));  // `one` is freed on return
  }
};

std::vector<uint16_t> download_output(const GemmAllReduce& op, int64_t m, int64_t n) {
  std::vector<uint16_t> h(m * n);
  WEAVE_CHECK_CUDA(cudaMemcpy(h.data(), op.output(m).data, h.size() * 2, cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

// Every mode x quant x world through self_test (known values; every element the sum of every
// rank's term, checked on every rank), at M of one row, a partial tile, one tile and many tiles.
TEST(EmulatedGemmAllReduce, SelfTestEveryModeQuantAndWorld) {
  WEAVE_REQUIRE_GPUS(1);
  const GemmAllReduceMode modes[] = {GemmAllReduceMode::kSplitLsa, GemmAllReduceMode::kSplitCe,
                                     GemmAllReduceMode::kFused, GemmAllReduceMode::kFusedRs, GemmAllReduceMode::kFusedCe,
                                     GemmAllReduceMode::kAuto};
  int passed = 0;
  for (int world : {2, 4, 8}) {
    bench::EmulatedWorld ew(world, 0, 20);
    for (const QuantCase& q : kQuants)
      for (GemmAllReduceMode mode : modes) {
        if (!fits_queues(mode, world)) {  // said once per mode and world, not skipped silently
          if (&q == &kQuants[0])
            std::printf("  not run: %s at W%d: %s\n", mode_name(mode).c_str(), world,
                        bench::EmulatedWorld::copy_engine_unsupported_reason(world).c_str());
          continue;
        }
        SCOPED_TRACE(std::string(q.name) + " " + mode_name(mode) + " W" + std::to_string(world));
        ew.run([&](comm::Group& g) {
          auto op = GemmAllReduce::Impl::create(g, config_of(q, mode, 384, 256, 4100));
          for (int64_t m : {1, 33, 128, 1000, 4096}) {
            const SelfTestReport rep = op->self_test(m);
            EXPECT_TRUE(rep.ok) << rep.detail;
            if (g.rank() == 0 && rep.ok) ++passed;
          }
        });
      }
  }
  std::printf("  GemmAllReduce self-tests passed: %d (rank 0 counted)\n", passed);
}

// self_test has teeth: gemm-only moves nothing, so every element misses the peer's term, and the
// error is attributed to that peer.
TEST(EmulatedGemmAllReduce, SelfTestFailsWhenNothingMoves) {
  WEAVE_REQUIRE_GPUS(1);
  bench::EmulatedWorld ew(2, 0, 10);
  ew.run([&](comm::Group& g) {
    auto op = GemmAllReduce::Impl::create(g, config_of(kQuants[0], GemmAllReduceMode::kGemmOnly, 256, 512, 256));
    const SelfTestReport rep = op->self_test(200);
    EXPECT_FALSE(rep.ok) << rep.detail;
    EXPECT_EQ(rep.wrong_from_rank[g.rank()], 0) << "the own term is computed locally";
    EXPECT_GT(rep.wrong_from_rank[1 - g.rank()], 0) << "the peer's term never arrived";
    if (g.rank() == 0) std::printf("  %s\n", rep.detail.c_str());
  });
}

// Random operands per rank: fused, fused-rs and fused-ce (W = 2, where the emulated world runs copy
// streams) output bitwise equal to split-lsa's (same tiles, own
// term rounded as the split partial), identical on every rank, and within tolerance of the sum of per-rank
// gpu_reference_gemm results (a plain CUDA-core GEMM); exact_own within the same tolerance. Every
// output NaN-poisoned before its call. W = 2 and 4 over every M; W = 8 (the lsa modes) at M = 1,
// 128 and 1000.
TEST(EmulatedGemmAllReduce, FusedEqualsSplitBitwiseAndMatchesReference) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 512, m_max = 16384;
  std::mt19937_64 rng(20261201);
  // 16384 at W = 2 only (every rank regenerates every source's A on the host: W^2 quantisations).
  std::vector<int64_t> ms = {1, 33, 128, 1000, 4096, 8192, 16384, 1 + static_cast<int64_t>(rng() % 8000)};
  for (int world : {2, 4, 8}) {
    if (!fits_queues(GemmAllReduceMode::kFused, world)) {
      ADD_FAILURE() << "W" << world << " not run: " << 2 * world << " streams exceed the hardware queues";
      continue;
    }
    bench::EmulatedWorld ew(world, 0, 10);
    for (const QuantCase& q : kQuants) {
      SCOPED_TRACE(std::string(q.name) + " W" + std::to_string(world));
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        auto fused = GemmAllReduce::Impl::create(g, config_of(q, GemmAllReduceMode::kFused, n, k, m_max));
        auto split = GemmAllReduce::Impl::create(g, config_of(q, GemmAllReduceMode::kSplitLsa, n, k, m_max));
        auto ecfg = config_of(q, GemmAllReduceMode::kFused, n, k, m_max);
        ecfg.exact_own = true;
        auto exact = GemmAllReduce::Impl::create(g, ecfg);
        auto rs = GemmAllReduce::Impl::create(g, config_of(q, GemmAllReduceMode::kFusedRs, n, k, m_max));
        // fused-ce runs mxfp8's native kernel (the bf16 route's either/or cannot fork its copy
        // streams), so its split twin for mxfp8 is split-lsa on the native kernel too.
        std::unique_ptr<GemmAllReduce> ce, ce_split;
        if (fits_queues(GemmAllReduceMode::kFusedCe, world)) {
          ce = GemmAllReduce::Impl::create(g, config_of(q, GemmAllReduceMode::kFusedCe, n, k, m_max));
          if (q.quant == ScaleMode::kMxfp8) {
            auto c = config_of(q, GemmAllReduceMode::kSplitLsa, n, k, m_max);
            c.mx_route = MxRoute::kNative;
            ce_split = GemmAllReduce::Impl::create(g, c);
          }
        }
        std::vector<bench::DeviceOperand> bs;  // every rank's B shard (this rank regenerates them)
        for (int s = 0; s < world; ++s)
          bs.push_back(bench::upload_operand(
              bench::quantize_parallel(bench::random_operand(77 + s, n, k), n, k, q.quant, ref::Operand::kB), dev));
        Stream st;
        for (int64_t m : ms) {
          if (m > 8192 && world > 2) continue;
          if (world == 8 && m != 1 && m != 128 && m != 1000) continue;
          const std::vector<bench::DeviceOperand> as = upload_every_a(world, 1000, m, k, q, dev);
          test::LayoutScales held;
          const GemmScales sc = test::scales_in_layout(q.layout, as[r], bs[r], held);
          const size_t bytes = static_cast<size_t>(m * n) * 2;
          // One op's call at a time across the ranks, its output NaN-poisoned first
          // (test::poisoned_call; this test is about numerics, back-to-back calls are BackToBack's
          // and the soak's).
          auto call = [&](GemmAllReduce& op) {
            return test::poisoned_call(g, op, m, as[r].view, bs[r].view, sc, bytes, st.s);
          };
          const std::vector<uint8_t> hf = call(*fused), he = call(*exact), hr = call(*rs);
          const std::vector<uint8_t> hc = ce ? call(*ce) : std::vector<uint8_t>{};
          const std::vector<uint8_t> hn = ce_split ? call(*ce_split) : std::vector<uint8_t>{};
          const std::vector<uint8_t> hs = call(*split);
          EXPECT_EQ(fused->last_mode(), GemmAllReduceMode::kFused);
          EXPECT_EQ(std::memcmp(hf.data(), hs.data(), bytes), 0) << "m " << m << ": fused differs from split-lsa";
          EXPECT_EQ(std::memcmp(hr.data(), hs.data(), bytes), 0) << "m " << m << ": fused-rs differs from split-lsa";
          if (ce) {
            EXPECT_EQ(ce->last_mode(), GemmAllReduceMode::kFusedCe);
            EXPECT_EQ(std::memcmp(hc.data(), ce_split ? hn.data() : hs.data(), bytes), 0)
                << "m " << m << ": fused-ce differs from split-lsa" << (ce_split ? " (native mxfp8)" : "");
          }
          const auto hashes = g.all_gather(fnv1a64(hf.data(), bytes), "the output hash");
          for (int s = 1; s < world; ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": rank " << s << " differs";
          // The sum of every rank's reference GEMM and of their magnitudes, and the bound of a sum
          // of bf16 partials against it (testing/reduce_reference.hpp: an element whose terms cancel
          // is bounded by their sizes).
          const GemmProblem p{.m = m, .n = n, .k = k, .mode = q.quant, .scale_layout = ScaleLayout::kRaw, .out_dtype = DType::kBF16};
          SummedReference want(as, bs, p, st.s);
          const bench::Tolerance tol = bench::reduced_gemm_tolerance(q.quant, world);
          bench::DeviceBuffer fused_out(bytes), exact_out(bytes);
          fused_out.upload(hf.data(), bytes);
          exact_out.upload(he.data(), bytes);
          for (auto* out : {&fused_out, &exact_out}) {
            const ref::Comparison cmp = bench::gpu_compare(TensorView::matrix(out->get(), DType::kBF16, m, n, dev),
                                                           want.sum.as<float>(), tol, st.s, want.mag.as<float>());
            const char* what = out == &exact_out ? "exact_own" : "fused";
            EXPECT_EQ(cmp.wrong, 0) << "m " << m << " " << what << ": " << cmp.wrong << " of " << cmp.count
                                    << " beyond the bound (never written " << cmp.never_written << ", first at "
                                    << cmp.first_wrong << "), rel_l2 " << cmp.rel_l2;
            // A whole-output bound that does not loosen with world size (issue 36 item 12); measured
            // 0.0020-0.0024 at W = 2 and 4 (bf16 output rounding), 4x below it.
            EXPECT_LT(cmp.rel_l2, test::kFusedRelL2Bound) << "m " << m << " " << what;
            if (r == 0 && m == 4096)
              std::printf("  %s W%d m %lld %-9s: rel_l2 %.3g vs the summed reference\n", q.name, world,
                          static_cast<long long>(m), what, cmp.rel_l2);
          }
          g.barrier();  // nobody starts the next m while a peer still reads this one's output
        }
      });
    }
  }
}

// mxfp8's bf16 route in the fused operator (fused/mx_route.hpp): every rank converts its A_r, B_r
// and runs the bf16 kernel, except a rank whose A holds scales the conversion cannot carry exactly
// (bytes 5 on non-zero elements), which runs its native kernel instead: decided per rank on the
// GPU before any partial leaves. fused, fused-rs and split-lsa on the route: bitwise equal, every
// rank's output identical, within the bound of the summed reference.
TEST(EmulatedGemmAllReduce, Mxfp8RouteIsEitherOrPerRank) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 512, m_max = 1000;
  const QuantCase* q = nullptr;
  for (const QuantCase& c : kQuants)
    if (c.quant == ScaleMode::kMxfp8 && c.layout == ScaleLayout::kRaw) q = &c;
  ASSERT_NE(q, nullptr);
  for (int world : {2, 4})
    for (int odd : {-1, world - 1}) {  // -1: every rank on the route
      SCOPED_TRACE("W" + std::to_string(world) + " odd rank " + std::to_string(odd));
      bench::EmulatedWorld ew(world, 0, 20);
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        auto with = [&](GemmAllReduceMode mode) {
          auto c = config_of(*q, mode, n, k, m_max);
          c.mx_route = MxRoute::kBf16;
          return GemmAllReduce::Impl::create(g, c);
        };
        auto fused = with(GemmAllReduceMode::kFused);
        auto rs = with(GemmAllReduceMode::kFusedRs);
        auto split = with(GemmAllReduceMode::kSplitLsa);
        std::vector<bench::DeviceOperand> bs;
        for (int s = 0; s < world; ++s)
          bs.push_back(bench::upload_operand(
              bench::quantize_parallel(bench::random_operand(77 + s, n, k), n, k, q->quant, ref::Operand::kB), dev));
        Stream st;
        for (int64_t m : {33, 1000}) {
          const std::vector<bench::DeviceOperand> as = test::mx_a_with_odd_rank(world, odd, m, k, 5000, dev);
          const GemmScales sc{as[r].scale_view, bs[r].scale_view};
          const size_t bytes = static_cast<size_t>(m * n) * 2;
          std::vector<std::vector<uint8_t>> outs;
          for (GemmAllReduce* op : {fused.get(), rs.get(), split.get()}) {
            outs.push_back(test::poisoned_call(g, *op, m, as[r].view, bs[r].view, sc, bytes, st.s));
            EXPECT_TRUE(GemmAllReduce::Impl::of(*op).last_mx_bf16_route);
          }
          EXPECT_EQ(outs[0], outs[2]) << "m " << m << ": fused differs from split-lsa on the same route";
          EXPECT_EQ(outs[1], outs[2]) << "m " << m << ": fused-rs differs from split-lsa on the same route";
          const auto hashes = g.all_gather(fnv1a64(outs[0].data(), bytes), "the output hash");
          for (int s = 1; s < world; ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": rank " << s << " differs";
          const GemmProblem p{.m = m, .n = n, .k = k, .mode = q->quant, .scale_layout = q->layout, .out_dtype = DType::kBF16};
          SummedReference want(as, bs, p, st.s);
          bench::DeviceBuffer got(bytes);
          got.upload(outs[0].data(), bytes);
          const ref::Comparison cmp =
              bench::gpu_compare(TensorView::matrix(got.get(), DType::kBF16, m, n, dev), want.sum.as<float>(),
                                 bench::reduced_gemm_tolerance(q->quant, world), st.s, want.mag.as<float>());
          EXPECT_EQ(cmp.wrong, 0) << "m " << m << ": " << cmp.wrong << " of " << cmp.count << " beyond the bound, rel_l2 "
                                  << cmp.rel_l2;
        }
      });
    }
}

// The decode route (M <= 32): weave's decode GEMV into the window, then the lsa all-reduce (LL at
// these sizes). self_test at W = 2, 4, 8 in every quant the GEMV implements; random operands
// within the summed-reference bound and identical on every rank; auto takes decode where it was
// measured faster (bf16 and mxfp8, m <= 16: fused/all_reduce/plan.hpp) and not elsewhere; decode refuses m = 33 by name and mxfp8 packed scales (the GEMV reads raw) at
// construction.
TEST(EmulatedGemmAllReduce, DecodeRouteGemvThenLowLatencyAllReduce) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 384, k = 256, m_max = 64;
  int self_tests = 0;
  for (int world : {2, 4, 8}) {
    bench::EmulatedWorld ew(world, 0, 20);
    for (const QuantCase& q : kQuants) {
      SCOPED_TRACE(std::string(q.name) + " W" + std::to_string(world));
      ew.run([&](comm::Group& g) {
        if (q.layout == ScaleLayout::kPacked) {
          const std::string msg = test::error_of(
              [&] { GemmAllReduce::Impl::create(g, config_of(q, GemmAllReduceMode::kDecode, n, k, m_max)); },
              Status::kUnavailable);
          EXPECT_NE(msg.find("raw scales only"), std::string::npos) << msg;
          return;
        }
        auto op = GemmAllReduce::Impl::create(g, config_of(q, GemmAllReduceMode::kDecode, n, k, m_max));
        for (int64_t m : {1, 7, 16, 29, 32}) {
          const SelfTestReport rep = op->self_test(m);
          EXPECT_TRUE(rep.ok) << "m " << m << ": " << rep.detail;
          EXPECT_EQ(op->last_mode(), GemmAllReduceMode::kDecode);
          if (g.rank() == 0 && rep.ok) ++self_tests;
        }
        OneHot oh(m_max, n, k, g.rank());
        Stream st;
        const std::string msg = test::error_of(
            [&] { op->run(33, oh.a_view(33, g.device()), oh.b_view(g.device()), {}, st.s); }, Status::kInvalidArgument);
        EXPECT_NE(msg.find("mode decode runs m <= 32"), std::string::npos) << msg;
      });
    }
  }
  std::printf("  decode self-tests passed: %d (rank 0 counted)\n", self_tests);

  for (int world : {2, 4}) {
    bench::EmulatedWorld ew(world, 0, 10);
    for (const QuantCase& q : kQuants) {
      if (q.layout == ScaleLayout::kPacked) continue;
      SCOPED_TRACE(std::string(q.name) + " W" + std::to_string(world));
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        auto decode = GemmAllReduce::Impl::create(g, config_of(q, GemmAllReduceMode::kDecode, n, k, m_max));
        auto autop = GemmAllReduce::Impl::create(g, config_of(q, GemmAllReduceMode::kAuto, n, k, m_max));
        std::vector<bench::DeviceOperand> bs;
        for (int s = 0; s < world; ++s)
          bs.push_back(bench::upload_operand(
              bench::quantize_parallel(bench::random_operand(300 + s, n, k), n, k, q.quant, ref::Operand::kB), dev));
        Stream st;
        for (int64_t m : {1, 13, 32, 33}) {
          const std::vector<bench::DeviceOperand> as = upload_every_a(world, 4000, m, k, q, dev);
          test::LayoutScales held;
          const GemmScales sc = test::scales_in_layout(q.layout, as[r], bs[r], held);
          const size_t bytes = static_cast<size_t>(m * n) * 2;
          const GemmProblem p{.m = m, .n = n, .k = k, .mode = q.quant, .scale_layout = ScaleLayout::kRaw, .out_dtype = DType::kBF16};
          SummedReference want(as, bs, p, st.s);
          for (GemmAllReduce* op : {decode.get(), autop.get()}) {
            if (op == decode.get() && m > 32) continue;
            bench::poison_nan(op->output(m).data, bytes, DType::kBF16, st.s);
            comm::sync_stream_bounded(st.s, 30, "inputs and poison");
            g.barrier();
            op->run(m, as[r].view, bs[r].view, sc, st.s);
            comm::sync_stream_bounded(st.s, 30, "the call, m " + std::to_string(m));  // nothing enqueued after it
            op->check();
            const bool want_decode = op == decode.get() || fused::gar_decode_pays(q.quant, m);
            EXPECT_EQ(op->last_mode() == GemmAllReduceMode::kDecode, want_decode)
                << "m " << m << ": took " << to_string(op->last_mode()) << " (" << op->plan(m).reason << ")";
            const ref::Comparison cmp =
                bench::gpu_compare(TensorView::matrix(op->output(m).data, DType::kBF16, m, n, dev), want.sum.as<float>(),
                                   bench::reduced_gemm_tolerance(q.quant, world), st.s, want.mag.as<float>());
            EXPECT_EQ(cmp.wrong, 0) << "m " << m << " " << to_string(op->last_mode()) << ": " << cmp.wrong << " of "
                                    << cmp.count << " beyond the bound (never written " << cmp.never_written
                                    << "), rel_l2 " << cmp.rel_l2;
            std::vector<uint8_t> h(bytes);
            WEAVE_CHECK_CUDA(cudaMemcpy(h.data(), op->output(m).data, bytes, cudaMemcpyDeviceToHost));
            const auto hashes = g.all_gather(fnv1a64(h.data(), bytes), "the output hash");
            for (int s = 1; s < world; ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": rank " << s << " differs";
            if (r == 0 && m == 13)
              std::printf("  %s W%d m 13 %s: rel_l2 %.3g vs the summed reference\n", q.name, world,
                          mode_name(op->last_mode()).c_str(), cmp.rel_l2);
            g.barrier();
          }
        }
      });
    }
  }
}

// Negative controls of the fused protocol, each with a slow rank 1 (every tile's stores start 2 ms
// late). One chunk per band of 256 tiles, so a chunk spans four waves of a rank's 65 CTAs: rank 1's
// partials for band 0 land over ~8 ms, and its own band (the next round) after them. With every
// mechanism on, 0 wrong; skipping the partial wait (own tiles summed before the peer's partials
// landed), the chunk election (a chunk's flag published after its first tile) or the arrival wait
// (rank 0 reads its output as soon as its own kernel ends) must each corrupt rank 0's output.
// The same for fused-rs: its tail's partial wait and arrival wait, each skipped, must corrupt. And
// for fused-ce: its combine's wait for the landed copies, the chunk election (a copy triggered
// after a chunk's first tile) and the trigger lanes' flag waits (every copy triggered at once),
// each skipped, must corrupt.
TEST(EmulatedGemmAllReduce, SkippingAWaitOrTheElectionIsCaught) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 256, m = 16384;
  enum Control {
    kNone, kPartialWait, kElection, kArrivalWait, kRsNone, kRsPartialWait, kRsArrivalWait,
    kCeNone, kCePartialWait, kCeElection, kCeArrivalWait
  };
  ASSERT_TRUE(fits_queues(GemmAllReduceMode::kFusedCe, 2)) << bench::EmulatedWorld::copy_engine_unsupported_reason(2);
  for (Control ctl : {kNone, kPartialWait, kElection, kArrivalWait, kRsNone, kRsPartialWait, kRsArrivalWait, kCeNone,
                      kCePartialWait, kCeElection, kCeArrivalWait}) {
    bench::EmulatedWorld ew(2, 0, 20);
    int64_t wrong0 = 0;
    ew.run([&](comm::Group& g) {
      const bool rs = ctl >= kRsNone && ctl < kCeNone, ce = ctl >= kCeNone;
      auto cfg = config_of(kQuants[0],
                           rs ? GemmAllReduceMode::kFusedRs : (ce ? GemmAllReduceMode::kFusedCe : GemmAllReduceMode::kFused),
                           n, k, m);
      cfg.skip_partial_wait = ctl == kPartialWait || ctl == kRsPartialWait || ctl == kCePartialWait;
      cfg.publish_every_tile = ctl == kElection || ctl == kCeElection;
      cfg.skip_arrival_wait = ctl == kArrivalWait || ctl == kRsArrivalWait || ctl == kCeArrivalWait;
      cfg.chunks = 1;
      if (g.rank() == 1) cfg.delay_stores_ns = 2'000'000;
      auto op = GemmAllReduce::Impl::create(g, cfg);
      OneHot oh(m, n, k, g.rank());
      oh.set_a(5, m);
      Stream st;
      WEAVE_CHECK_CUDA(cudaMemsetAsync(op->output(m).data, 0xFF, m * n * 2, st.s));
      WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
      g.barrier();
      bench::DeviceBuffer snapshot(m * n * 2);
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues")
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(snapshot.get(), op->output(m).data, snapshot.bytes(), cudaMemcpyDeviceToDevice, st.s));
      comm::sync_stream_bounded(st.s, 20, "the controlled call");
      std::vector<uint16_t> out(m * n);
      snapshot.download(out.data(), snapshot.bytes());
      if (g.rank() == 0) wrong0 = oh.wrong(out, 5, 2, m);
      g.barrier();
    });
    const char* names[] = {"every mechanism on",          "partial wait SKIPPED",        "chunk election OFF",
                           "arrival wait SKIPPED",        "fused-rs, every mechanism on", "fused-rs, tail's partial wait SKIPPED",
                           "fused-rs, arrival wait SKIPPED", "fused-ce, every mechanism on",
                           "fused-ce, landed wait SKIPPED", "fused-ce, chunk election OFF",
                           "fused-ce, trigger waits SKIPPED"};
    if (ctl == kNone || ctl == kRsNone || ctl == kCeNone) EXPECT_EQ(wrong0, 0) << names[ctl];
    else EXPECT_GT(wrong0, 0) << names[ctl] << " must corrupt the output of rank 0";
    std::printf("  %s: rank 0 saw %lld wrong elements of %lld\n", names[ctl], static_cast<long long>(wrong0),
                static_cast<long long>(m * n));
  }
}

// No credit is needed, in fused (it has none) nor split-lsa (run here with flow_control = false):
// rank 0 reads call 1's output 30 ms after its kernel (a slow consumer) while rank 1 goes straight on
// to call 2 with other values. Rank 1's final tiles of call 2 go to rank 0 only after rank 0's
// partials of call 2 arrived, i.e. after rank 0 finished reading call 1: 0 wrong. (GemmAllGather,
// which has no such dependency, needs its credit; its test shows the corruption without.)
TEST(EmulatedGemmAllReduce, AFastRankNeverOverwritesWhatASlowReaderHasNotRead) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 256, m = 1024;
  for (GemmAllReduceMode mode : {GemmAllReduceMode::kFused, GemmAllReduceMode::kSplitLsa}) {
    bench::EmulatedWorld ew(2, 0, 20);
    int64_t wrong = 0, calls_seen = 0;
    ew.run([&](comm::Group& g) {
      auto cfg = config_of(kQuants[0], mode, n, k, m);
      cfg.flow_control = false;
      auto op = GemmAllReduce::Impl::create(g, cfg);
      OneHot oh(m, n, k, g.rank());
      Stream st;
      bench::DeviceBuffer a2(m * k * 2), snapshot(m * n * 2);
      const auto h2 = oh.host_a(6, m);
      a2.upload(h2.data(), h2.size() * 2);
      oh.set_a(5, m);
      g.barrier();
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues"); the GPU is not synchronised
      if (g.rank() == 0) {
        bench::spin_delay(30'000'000, st.s);
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(snapshot.get(), op->output(m).data, m * n * 2, cudaMemcpyDeviceToDevice, st.s));
      }
      op->run(m, TensorView::matrix(a2.get(), DType::kBF16, m, k, g.device()), oh.b_view(g.device()), {}, st.s);
      comm::sync_stream_bounded(st.s, 20, "two calls");
      if (g.rank() == 0) {
        std::vector<uint16_t> h(m * n);
        snapshot.download(h.data(), h.size() * 2);
        wrong = oh.wrong(h, 5, 2, m);
        calls_seen = oh.wrong(download_output(*op, m, n), 6, 2, m);  // call 2's output is right too
      }
      g.barrier();
    });
    EXPECT_EQ(wrong, 0) << mode_name(mode) << ": the slow reader must see call 1's output";
    EXPECT_EQ(calls_seen, 0) << mode_name(mode) << ": call 2's output";
    std::printf("  %s without credits: the slow reader saw %lld wrong elements\n", mode_name(mode).c_str(),
                static_cast<long long>(wrong));
  }
}

// fused-ce needs its credit: a peer's copy engine reads this rank's output during the peer's call,
// and a call of another M owns other rows. Rank 0 pulls slowly (each trigger 3 ms late); rank 1
// runs call 1 at m = 1024 (rows 512..1023 are its band: final tiles rank 0 pulls last) and goes
// straight on to call 2 at m = 2048, where those rows are band 0's and take rank 1's partials at
// once. With the credit, rank 1's call 2 waits for rank 0's call 2 (after rank 0's pulls of call 1
// joined): rank 0's snapshot of call 1 is right. Without it (flow_control = false) the snapshot
// must hold call 2's partials.
TEST(EmulatedGemmAllReduce, FusedCeCreditKeepsAFastRankFromOverwritingWhatASlowPullerReads) {
  WEAVE_REQUIRE_GPUS(1);
  ASSERT_TRUE(fits_queues(GemmAllReduceMode::kFusedCe, 2)) << bench::EmulatedWorld::copy_engine_unsupported_reason(2);
  const int64_t n = 512, k = 256, m1 = 1024, m2 = 2048;
  for (bool credit : {true, false}) {
    bench::EmulatedWorld ew(2, 0, 20);
    int64_t wrong = -1, second = -1;
    ew.run([&](comm::Group& g) {
      auto cfg = config_of(kQuants[0], GemmAllReduceMode::kFusedCe, n, k, m2);
      cfg.flow_control = credit;
      cfg.chunks = 1;
      if (g.rank() == 0) cfg.delay_pull_ns = 3'000'000;
      auto op = GemmAllReduce::Impl::create(g, cfg);
      OneHot oh(m2, n, k, g.rank());
      Stream st;
      bench::DeviceBuffer a2(m2 * k * 2), snapshot(m1 * n * 2);
      const auto h2 = oh.host_a(6, m2);
      a2.upload(h2.data(), h2.size() * 2);
      oh.set_a(5, m1);
      g.barrier();
      op->run(m1, oh.a_view(m1, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues"); the GPU is not synchronised
      if (g.rank() == 0)
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(snapshot.get(), op->output(m1).data, m1 * n * 2, cudaMemcpyDeviceToDevice, st.s));
      op->run(m2, TensorView::matrix(a2.get(), DType::kBF16, m2, k, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();
      comm::sync_stream_bounded(st.s, 20, "two calls");
      op->check();
      if (g.rank() == 0) {
        std::vector<uint16_t> h(m1 * n);
        snapshot.download(h.data(), h.size() * 2);
        wrong = oh.wrong(h, 5, 2, m1);
        second = oh.wrong(download_output(*op, m2, n), 6, 2, m2);
      }
      g.barrier();
    });
    EXPECT_EQ(second, 0) << "call 2's output";
    if (credit) EXPECT_EQ(wrong, 0) << "with the credit, rank 0's pulls of call 1 read call 1's rows";
    else EXPECT_GT(wrong, 0) << "without the credit, rank 1's call 2 must overwrite rows rank 0 still pulls";
    std::printf("  fused-ce, credit %s: the slow puller's call 1 had %lld wrong elements\n", credit ? "on" : "OFF",
                static_cast<long long>(wrong));
  }
}

// Back-to-back calls of changing M (and mode, for auto) on one op, no host sync between them, a
// slow rank and late ranks; every call's output snapshotted on the device and checked at the end.
TEST(EmulatedGemmAllReduce, BackToBackCallsOfChangingMWithASlowRank) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 256, m_max = 4096;
  const std::vector<int64_t> ms = {4096, 7, 128, 1, 640, 1100, 3000, 33};
  for (GemmAllReduceMode mode : {GemmAllReduceMode::kFused, GemmAllReduceMode::kSplitLsa, GemmAllReduceMode::kAuto,
                                 GemmAllReduceMode::kFusedCe}) {
    const int world = fits_queues(mode, 4) ? 4 : 2;  // fused-ce: W = 2 (copy streams, "Queues")
    bench::EmulatedWorld ew(world, 0, 20);
    SCOPED_TRACE(mode_name(mode));
    ew.run([&](comm::Group& g) {
      auto cfg = config_of(kQuants[0], mode, n, k, m_max);
      if (g.rank() == 2 % world) cfg.delay_stores_ns = 100'000;
      if (g.rank() == 0 && mode == GemmAllReduceMode::kFusedCe) cfg.delay_pull_ns = 100'000;  // a slow puller too
      auto op = GemmAllReduce::Impl::create(g, cfg);
      OneHot oh(m_max, n, k, g.rank());
      Stream st;
      std::vector<bench::DeviceBuffer> as, snaps;
      for (size_t c = 0; c < ms.size(); ++c) {
        const auto h = oh.host_a(100 + c, ms[c]);
        as.emplace_back(m_max * k * 2);
        as.back().upload(h.data(), h.size() * 2);
        snaps.emplace_back(ms[c] * n * 2);
      }
      g.barrier();
      for (size_t c = 0; c < ms.size(); ++c) {
        if (g.rank() == static_cast<int>(c % world)) bench::spin_delay(2'000'000, st.s);  // a late rank
        op->run(ms[c], TensorView::matrix(as[c].get(), DType::kBF16, ms[c], k, g.device()), oh.b_view(g.device()), {},
                st.s);
        g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues"); the GPU is not synchronised
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(snaps[c].get(), op->output(ms[c]).data, snaps[c].bytes(),
                                         cudaMemcpyDeviceToDevice, st.s));
      }
      comm::sync_stream_bounded(st.s, 20, "back-to-back calls, mode " + mode_name(mode));
      op->check();
      for (size_t c = 0; c < ms.size(); ++c) {
        std::vector<uint16_t> h(ms[c] * n);
        snaps[c].download(h.data(), h.size() * 2);
        EXPECT_EQ(oh.wrong(h, 100 + c, world, ms[c]), 0) << "rank " << g.rank() << " call " << c << " (m " << ms[c] << ")";
      }
      g.barrier();
    });
  }
}

// Graph replay: each rank captures [input variant copy -> run -> device check] per variant, for two
// M on one op; 1000 replays in an interleaved order, epochs started 50 calls before the 2^32 wrap;
// #wrong accumulated on the device.
TEST(EmulatedGemmAllReduce, GraphReplaysAcrossTheEpochWrapWithChangingInputs) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 256, m_max = 1024;
  const int world = 2, variants = 5, replays = 1000;
  const int64_t graph_ms[2] = {1024, 77};
  // fused-ce: FusedCeGraphReplaysInOneGraphAcrossTheEpochWrap (one graph per rank cannot run here).
  for (GemmAllReduceMode mode : {GemmAllReduceMode::kFused, GemmAllReduceMode::kSplitLsa}) {
    bench::EmulatedWorld ew(world, 0, 20);
    SCOPED_TRACE(mode_name(mode));
    ew.run([&](comm::Group& g) {
      auto cfg = config_of(kQuants[0], mode, n, k, m_max);
      cfg.initial_epoch = 0xFFFFFFFFu - 50u;
      auto op = GemmAllReduce::Impl::create(g, cfg);
      OneHot oh(m_max, n, k, g.rank());
      Stream st;
      bench::DeviceBuffer wrong(8), a_live(m_max * k * 2);
      WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, 8));
      std::vector<bench::DeviceBuffer> a_var, want;
      std::vector<cudaGraphExec_t> execs;
      for (int gi = 0; gi < 2; ++gi)
        for (int v = 0; v < variants; ++v) {
          const int64_t m = graph_ms[gi];
          const uint64_t seed = 500 + 10 * gi + v;
          const auto h = oh.host_a(seed, m);
          a_var.emplace_back(m_max * k * 2);
          a_var.back().upload(h.data(), h.size() * 2);
          const auto e = oh.expected(seed, world, m);
          want.emplace_back(e.size() * 2);
          want.back().upload(e.data(), e.size() * 2);
          cudaGraph_t graph;
          WEAVE_CHECK_CUDA(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal));
          WEAVE_CHECK_CUDA(cudaMemcpyAsync(a_live.get(), a_var.back().get(), m * k * 2, cudaMemcpyDeviceToDevice, st.s));
          op->run(m, TensorView::matrix(a_live.get(), DType::kBF16, m, k, g.device()), oh.b_view(g.device()), {}, st.s);
          count_diff_kernel<<<64, 256, 0, st.s>>>(static_cast<const uint16_t*>(op->output(m).data),
                                                  want.back().as<uint16_t>(), m * n, wrong.as<unsigned long long>());
          WEAVE_CHECK_CUDA(cudaStreamEndCapture(st.s, &graph));
          cudaGraphExec_t exec;
          WEAVE_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
          WEAVE_CHECK_CUDA(cudaGraphDestroy(graph));
          execs.push_back(exec);
        }
      g.barrier();
      std::mt19937 order(99);  // the same order on every rank (every rank must make the same calls)
      for (int i = 0; i < replays; ++i) {
        WEAVE_CHECK_CUDA(cudaGraphLaunch(execs[order() % execs.size()], st.s));
        g.barrier();  // lockstep enqueue: a replay ends in a check that waits for the call ("Queues")
      }
      comm::sync_stream_bounded(st.s, 60, "graph replays");
      op->check();
      unsigned long long bad = 0;
      wrong.download(&bad, 8);
      EXPECT_EQ(bad, 0ull) << "rank " << g.rank() << ": wrong elements over " << replays << " replays";
      for (auto e : execs) cudaGraphExecDestroy(e);
      g.barrier();
    });
  }
}

// fused-ce in graphs. A graph per rank, replayed by each rank as above, cannot run in the emulated
// world: a replayed graph enters the shared hardware queues as the driver schedules it, and a
// rank's copy-stream wait (on a trigger its kernel stores once the PEER's chunk is ready) can sit
// ahead of that peer's kernel in a queue: seen on the device (2026-12-02, the 9th replay: rank 0's
// kernel waited for rank 1's credit until its 20 s timeout, then rank 1's kernel started). A
// multi-GPU run has no shared queue. So here both ranks' calls are captured into ONE graph (rank
// 1's stream joins rank 0's capture through an event), whose launch hands the driver every kernel
// and every copy as one DAG. Each variant: [both ranks: input copy -> run -> device check]; 1000
// replays by rank 0 in a random order over two M, epochs started 50 calls before the 2^32 wrap.
// fused runs the same graphs, and the time per replay of both is printed (one GPU: not NVLink).
TEST(EmulatedGemmAllReduce, FusedCeGraphReplaysInOneGraphAcrossTheEpochWrap) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 256, m_max = 1024;
  const int world = 2, variants = 5, replays = 1000;
  const int64_t graph_ms[2] = {1024, 77};
  ASSERT_TRUE(fits_queues(GemmAllReduceMode::kFusedCe, world)) << bench::EmulatedWorld::copy_engine_unsupported_reason(world);
  for (GemmAllReduceMode mode : {GemmAllReduceMode::kFusedCe, GemmAllReduceMode::kFused}) {
  SCOPED_TRACE(mode_name(mode));
  bench::EmulatedWorld ew(world, 0, 20);
  std::vector<cudaStream_t> streams(world, nullptr);
  std::vector<cudaEvent_t> joined(world, nullptr);  // [r]: rank r's part of the capture is enqueued
  std::vector<cudaGraphExec_t> execs;
  ew.run([&](comm::Group& g) {
    const int r = g.rank();
    auto cfg = config_of(kQuants[0], mode, n, k, m_max);
    cfg.initial_epoch = 0xFFFFFFFFu - 50u;
    auto op = GemmAllReduce::Impl::create(g, cfg);
    OneHot oh(m_max, n, k, r);
    Stream st;
    streams[r] = st.s;
    WEAVE_CHECK_CUDA(cudaEventCreateWithFlags(&joined[r], cudaEventDisableTiming));
    bench::DeviceBuffer wrong(8), a_live(m_max * k * 2);
    WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, 8));
    std::vector<bench::DeviceBuffer> a_var, want;
    g.barrier();
    for (int gi = 0; gi < 2; ++gi)
      for (int v = 0; v < variants; ++v) {
        const int64_t m = graph_ms[gi];
        const uint64_t seed = 700 + 10 * gi + v;
        const auto h = oh.host_a(seed, m);
        a_var.emplace_back(m_max * k * 2);
        a_var.back().upload(h.data(), h.size() * 2);
        const auto e = oh.expected(seed, world, m);
        want.emplace_back(e.size() * 2);
        want.back().upload(e.data(), e.size() * 2);
        if (r == 0) {
          WEAVE_CHECK_CUDA(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeRelaxed));
          WEAVE_CHECK_CUDA(cudaEventRecord(joined[0], st.s));
        }
        g.barrier();
        if (r != 0) WEAVE_CHECK_CUDA(cudaStreamWaitEvent(st.s, joined[0], 0));  // joins rank 0's capture
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(a_live.get(), a_var.back().get(), m * k * 2, cudaMemcpyDeviceToDevice, st.s));
        op->run(m, TensorView::matrix(a_live.get(), DType::kBF16, m, k, g.device()), oh.b_view(g.device()), {}, st.s);
        count_diff_kernel<<<64, 256, 0, st.s>>>(static_cast<const uint16_t*>(op->output(m).data),
                                                want.back().as<uint16_t>(), m * n, wrong.as<unsigned long long>());
        if (r != 0) WEAVE_CHECK_CUDA(cudaEventRecord(joined[r], st.s));
        g.barrier();
        if (r == 0) {
          for (int q = 1; q < world; ++q) WEAVE_CHECK_CUDA(cudaStreamWaitEvent(st.s, joined[q], 0));
          cudaGraph_t graph;
          WEAVE_CHECK_CUDA(cudaStreamEndCapture(st.s, &graph));
          cudaGraphExec_t exec;
          WEAVE_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
          WEAVE_CHECK_CUDA(cudaGraphDestroy(graph));
          execs.push_back(exec);
        }
        g.barrier();
      }
    if (r == 0) {
      std::mt19937 order(77);
      cudaEvent_t t0, t1;
      WEAVE_CHECK_CUDA(cudaEventCreate(&t0));
      WEAVE_CHECK_CUDA(cudaEventCreate(&t1));
      WEAVE_CHECK_CUDA(cudaEventRecord(t0, st.s));
      for (int i = 0; i < replays; ++i) WEAVE_CHECK_CUDA(cudaGraphLaunch(execs[order() % execs.size()], st.s));
      WEAVE_CHECK_CUDA(cudaEventRecord(t1, st.s));
      comm::sync_stream_bounded(st.s, 120, "one-graph replays");
      float ms = 0;
      WEAVE_CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
      std::printf("  %s, both ranks in one graph: %.1f us per replay (m 1024 or 77, N %lld, K_r %lld, W %d on one GPU)\n",
                  mode_name(mode).c_str(), 1000.0 * ms / replays, static_cast<long long>(n), static_cast<long long>(k),
                  world);
      cudaEventDestroy(t0);
      cudaEventDestroy(t1);
    }
    g.barrier();  // every replay of every rank's part is complete
    op->check();
    unsigned long long bad = 0;
    wrong.download(&bad, 8);
    EXPECT_EQ(bad, 0ull) << "rank " << r << ": wrong elements over " << replays << " replays";
    g.barrier();
    if (r == 0)
      for (auto e : execs) cudaGraphExecDestroy(e);
    WEAVE_CHECK_CUDA(cudaEventDestroy(joined[r]));
    g.barrier();
  });
  }
}

// A peer that never makes the call: the others' waits end after the timeout with a named error
// (rank, peer, flag, expected, seen), the kernel completes (no pipeline trap: its bound is above
// the comm timeout), and the op reports kTimeout and refuses further calls.
TEST(EmulatedGemmAllReduce, APeerThatNeverArrivesTimesOutNamingIt) {
  WEAVE_REQUIRE_GPUS(1);
  for (GemmAllReduceMode mode : {GemmAllReduceMode::kFused, GemmAllReduceMode::kSplitLsa, GemmAllReduceMode::kFusedCe}) {
    bench::EmulatedWorld ew(2, 0, 1.0);
    SCOPED_TRACE(mode_name(mode));
    ew.run([&](comm::Group& g) {
      auto op = GemmAllReduce::Impl::create(g, config_of(kQuants[0], mode, 512, 256, 1024));
      OneHot oh(1024, 512, 256, g.rank());
      oh.set_a(1, 1024);
      g.barrier();
      if (g.rank() == 0) {
        Stream st;
        op->run(1024, oh.a_view(1024, g.device()), oh.b_view(g.device()), {}, st.s);
        comm::sync_stream_bounded(st.s, 10, "the call whose peer never arrives");
        const std::string msg = test::error_of([&] { op->check(); }, Status::kTimeout);
        test::expect_first_call_timeout_names_everything(msg, 0, 1);  // rank, peer, flag, expected, seen
        std::printf("  %s: %s\n", mode_name(mode).c_str(), msg.c_str());
        EXPECT_FALSE(test::error_of([&] { op->run(1024, oh.a_view(1024, g.device()), oh.b_view(g.device()), {}, st.s); },
                                    Status::kTimeout)
                         .empty());
      }
    });
  }
}

// A peer whose partials come late (every tile's stores 1.5 s late, past the 1 s timeout): rank 0's
// own tiles' wait inside the GEMM pipeline times out by the comm bound, names the peer and the
// flag (phase 0), and the kernel completes (no pipeline trap: its bound is above the comm
// timeout). The end-of-call wait is skipped on both ranks (an agreed testing hook): a CTA with no
// tile holds the last ticket in some runs and would start that wait at once, so its timeout, not
// the pipeline's, was recorded first (seen 2026-12-01). Rank 1 had its peer's partials before rank
// 0 gave up, so it completes without an error.
TEST(EmulatedGemmAllReduce, PartialsThatNeverArriveTimeOutInsideThePipeline) {
  WEAVE_REQUIRE_GPUS(1);
  bench::EmulatedWorld ew(2, 0, 1.0);
  ew.run([&](comm::Group& g) {
    auto cfg = config_of(kQuants[0], GemmAllReduceMode::kFused, 512, 256, 1024);
    cfg.skip_arrival_wait = true;
    if (g.rank() == 1) cfg.delay_stores_ns = 1'500'000'000ull;
    auto op = GemmAllReduce::Impl::create(g, cfg);
    OneHot oh(1024, 512, 256, g.rank());
    oh.set_a(1, 1024);
    g.barrier();
    Stream st;
    op->run(1024, oh.a_view(1024, g.device()), oh.b_view(g.device()), {}, st.s);
    comm::sync_stream_bounded(st.s, 30, "the call with late partials");
    if (g.rank() == 0) {
      const std::string msg = test::error_of([&] { op->check(); }, Status::kTimeout);
      EXPECT_NE(msg.find("peer 1"), std::string::npos) << msg;
      EXPECT_NE(msg.find("phase 0"), std::string::npos) << "the partial wait: " << msg;
      std::printf("  rank 0: %s\n", msg.c_str());
    } else {
      EXPECT_NO_THROW(op->check()) << "rank 1 had rank 0's partials before rank 0 gave up";
    }
  });
}

// Issue 36 item 1: a combine wait that times out must not broadcast the tile it summed. Both ranks
// make call 1 and check it; then only rank 0 makes call 2 (rank 1 is alive but slow: it has not
// entered the call and still holds call 1's output). Rank 0's own tiles wait for rank 1's partials,
// time out (1 s) and are summed with call 1's stale staging: they must stay in rank 0's output.
// Rank 1's output must still be call 1's, every element (before the fix, rank 0 stored its stale
// sums of band 0 there), and its check() clean: nothing of its own failed.
TEST(EmulatedGemmAllReduce, ATimedOutCombineNeverOverwritesASlowPeersOutput) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 256, m = 1024;
  bench::EmulatedWorld ew(2, 0, 1.0);
  int64_t before = -1, after = -1;
  std::string rank0_error;
  std::atomic<bool> rank0_done{false};
  ew.run([&](comm::Group& g) {
    auto cfg = config_of(kQuants[0], GemmAllReduceMode::kFused, n, k, m);
    // The end-of-call wait skipped (the agreed testing hook, as in the test above): it would start
    // at once in a CTA without tiles, and its abort, claimed before the combine, hides the bug.
    cfg.skip_arrival_wait = true;
    auto op = GemmAllReduce::Impl::create(g, cfg);
    OneHot oh(m, n, k, g.rank());
    Stream st;
    oh.set_a(5, m);
    g.barrier();
    op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
    comm::sync_stream_bounded(st.s, 20, "call 1");
    op->check();
    if (g.rank() == 1) before = oh.wrong(download_output(*op, m, n), 5, 2, m);
    g.barrier();
    // Rank 0's call outlasts the world's 1 s rendezvous bound (its wait times out after 1 s), so
    // rank 1 waits for it on a host flag (bounded) instead of a barrier.
    if (g.rank() == 0) {
      oh.set_a(6, m);  // other values: a stale sum differs from call 1's
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      comm::sync_stream_bounded(st.s, 20, "call 2, whose peer never arrives");
      rank0_error = test::error_of([&] { op->check(); }, Status::kTimeout);
      rank0_done.store(true);
    } else {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!rank0_done.load() && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ASSERT_TRUE(rank0_done.load()) << "rank 0's call 2 did not finish in 30 s";
    }
    if (g.rank() == 1) {
      after = oh.wrong(download_output(*op, m, n), 5, 2, m);
      EXPECT_NO_THROW(op->check()) << "rank 1 made no call that failed";
    }
  });
  EXPECT_EQ(before, 0) << "call 1";
  EXPECT_NE(rank0_error.find("phase 0"), std::string::npos) << "rank 0's combine wait timed out: " << rank0_error;
  EXPECT_EQ(after, 0) << "rank 1's call-1 output was overwritten by rank 0's timed-out call 2";
  std::printf("  rank 0 timed out (%s); rank 1's previous output: %lld wrong elements\n", rank0_error.c_str(),
              static_cast<long long>(after));
}

// Issue 36 item 3: ranks that call one fused call with m = 1000 and 1001 (rows and bands cut from
// each rank's own m) get kMismatch on every rank naming both m (docs/memory_ordering.md
// "call-key"), not misplaced rows with a clean check() and not a timeout.
TEST(EmulatedGemmAllReduce, RanksThatDisagreeOnMAreAMismatchOnEveryRank) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 256, m_max = 1100;
  for (GemmAllReduceMode mode : {GemmAllReduceMode::kFused, GemmAllReduceMode::kFusedRs, GemmAllReduceMode::kFusedCe}) {
    if (!fits_queues(mode, 2)) {
      ADD_FAILURE() << mode_name(mode) << " not run: " << bench::EmulatedWorld::copy_engine_unsupported_reason(2);
      continue;
    }
    SCOPED_TRACE(mode_name(mode));
    bench::EmulatedWorld ew(2, 0, 2.0);
    ew.run([&](comm::Group& g) {
      auto op = GemmAllReduce::Impl::create(g, config_of(kQuants[0], mode, n, k, m_max));
      const int64_t m = 1000 + g.rank();
      OneHot oh(m_max, n, k, g.rank());
      oh.set_a(3, m);
      Stream st;
      g.barrier();
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues")
      comm::sync_stream_bounded(st.s, 20, "the call of disagreeing m");
      const std::string msg = test::error_of([&] { op->check(); }, Status::kMismatch);
      EXPECT_NE(msg.find("m = " + std::to_string(m)), std::string::npos) << msg;
      EXPECT_NE(msg.find("m = " + std::to_string(2001 - m)), std::string::npos) << "the peer's m: " << msg;
      if (g.rank() == 0) std::printf("  %s: %s\n", mode_name(mode).c_str(), msg.c_str());
      g.barrier();
    });
  }
}

namespace {

// One rank's part of a soak: `calls` calls of random M (16 variants, the same sequence on every
// rank from `seed`) over `ops` (picked at random per call, the same pick on every rank; bf16 or
// ptpc, whose operands are PtpcOneHot's), a late rank now and then, each output checked on the
// device against its closed form. Returns the calls made and how many were ptpc.
struct SoakCount {
  long long calls = 0, ptpc = 0;
};
SoakCount soak_rank(comm::Group& g, const std::vector<GemmAllReduce*>& ops, int64_t n, int64_t k, int64_t m_max,
                    int calls, uint64_t seed) {
  const int world = g.world_size(), dev = g.device();
  OneHot oh(m_max, n, k, g.rank());
  const test::PtpcOneHot pt(g.rank(), m_max, n, k,
                            [&](int64_t r, int64_t c) { return b_val(g.rank(), r, c); });
  Stream st;
  bench::DeviceBuffer wrong(8);
  WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, 8));
  constexpr int kVariants = 16;
  std::vector<bench::DeviceBuffer> a_var, a8_var, want, want_ptpc;
  std::vector<int64_t> var_m;
  std::mt19937_64 shared_rng(seed);  // the same sequence on every rank
  for (int v = 0; v < kVariants; ++v) {
    const int64_t m = 1 + static_cast<int64_t>(shared_rng() % m_max);
    var_m.push_back(m);
    const auto h = oh.host_a(seed * 100 + v, m);
    a_var.emplace_back(m_max * k * 2);
    a_var.back().upload(h.data(), h.size() * 2);
    const auto h8 = test::PtpcOneHot::host_a(h);
    a8_var.emplace_back(m_max * k);
    a8_var.back().upload(h8.data(), h8.size());
    for (bool ptpc : {false, true}) {
      const auto e = oh.expected(seed * 100 + v, world, m, ptpc);
      auto& w = ptpc ? want_ptpc : want;
      w.emplace_back(e.size() * 2);
      w.back().upload(e.data(), e.size() * 2);
    }
  }
  SoakCount count;
  g.barrier();
  for (int i = 0; i < calls; ++i) {
    const int v = static_cast<int>(shared_rng() % kVariants);
    GemmAllReduce* op = ops[shared_rng() % ops.size()];
    if (g.rank() == static_cast<int>(shared_rng() % world) && (i % 7) == 0) bench::spin_delay(20'000, st.s);
    const int64_t m = var_m[v];
    const bool fp8 = op->config().quant == ScaleMode::kPtpc;
    if (fp8)
      op->run(m, TensorView::matrix(a8_var[v].get(), DType::kE4M3, m, k, dev), pt.b_view(dev), pt.scales(m, dev), st.s);
    else
      op->run(m, TensorView::matrix(a_var[v].get(), DType::kBF16, m, k, dev), oh.b_view(dev), {}, st.s);
    ++count.calls;
    count.ptpc += fp8 ? 1 : 0;
    g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues"); the GPU is not synchronised
    count_diff_kernel<<<32, 256, 0, st.s>>>(static_cast<const uint16_t*>(op->output(m).data),
                                            (fp8 ? want_ptpc : want)[v].as<uint16_t>(), m * n,
                                            wrong.as<unsigned long long>());
    WEAVE_CHECK_LAUNCH();
    if (i % 256 == 255) comm::sync_stream_bounded(st.s, 60, "soak batch");
  }
  comm::sync_stream_bounded(st.s, 60, "soak");
  for (GemmAllReduce* op : ops) op->check();
  unsigned long long bad = 0;
  wrong.download(&bad, 8);
  EXPECT_EQ(bad, 0ull) << "rank " << g.rank() << " W" << world << ", " << ops[0]->describe();
  EXPECT_EQ(count.calls, calls) << "rank " << g.rank() << " W" << world;
  const auto all = g.all_gather(static_cast<uint64_t>(count.calls), "the soak's call count");
  for (int s = 0; s < world; ++s) EXPECT_EQ(all[s], all[0]) << "rank " << s << " W" << world;
  g.barrier();
  return count;
}

}  // namespace

// >= 10,000 randomised collective calls (a call = every rank's run() of one op) over W = 2 and 4:
// M, late rank, bf16 and ptpc (power-of-two row scales); fused and auto of both quants interleaved
// at W = 2, fused bf16 then fused ptpc at W = 4 (one op at a time there: testing/emulated_world.hpp
// "Queues"), fused-ce with a slow puller at W = 2 where the emulated world runs copy streams. Every
// output checked on the device against its closed form, every call counted.
TEST(EmulatedGemmAllReduce, RandomisedSoak) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 128, m_max = 1200;
  const QuantCase& bf16 = kQuants[0];
  const QuantCase& ptpc = kQuants[1];
  ASSERT_EQ(ptpc.quant, ScaleMode::kPtpc);
  SoakCount total;
  auto add = [&](const comm::Group& g, const SoakCount& c) {
    if (g.rank() != 0) return;
    total.calls += c.calls;
    total.ptpc += c.ptpc;
  };
  const auto t0 = std::chrono::steady_clock::now();
  {
    bench::EmulatedWorld ew(2, 0, 30);
    ew.run([&](comm::Group& g) {
      std::vector<std::unique_ptr<GemmAllReduce>> owned;
      for (const QuantCase* q : {&bf16, &ptpc})
        for (GemmAllReduceMode mode : {GemmAllReduceMode::kFused, GemmAllReduceMode::kAuto})
          owned.push_back(GemmAllReduce::Impl::create(g, config_of(*q, mode, n, k, m_max)));
      std::vector<GemmAllReduce*> ops;
      for (const auto& op : owned) ops.push_back(op.get());
      add(g, soak_rank(g, ops, n, k, m_max, 4000, 4244));
    });
  }
  {
    bench::EmulatedWorld ew(4, 0, 30);
    for (const QuantCase* q : {&bf16, &ptpc})
      ew.run([&](comm::Group& g) {
        auto fused = GemmAllReduce::Impl::create(g, config_of(*q, GemmAllReduceMode::kFused, n, k, m_max));
        add(g, soak_rank(g, {fused.get()}, n, k, m_max, 2500, q == &bf16 ? 4246 : 4247));
      });
  }
  if (fits_queues(GemmAllReduceMode::kFusedCe, 2)) {
    bench::EmulatedWorld ew(2, 0, 30);
    ew.run([&](comm::Group& g) {
      auto cfg = config_of(bf16, GemmAllReduceMode::kFusedCe, n, k, m_max);
      if (g.rank() == 1) cfg.delay_pull_ns = 5'000;  // a slow puller
      auto ce = GemmAllReduce::Impl::create(g, cfg);
      add(g, soak_rank(g, {ce.get()}, n, k, m_max, 1500, 777));
    });
  } else {
    ADD_FAILURE() << "fused-ce soak not run: " << bench::EmulatedWorld::copy_engine_unsupported_reason(2);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(total.calls, 10'000) << "collective calls over W = 2 and 4";
  EXPECT_GT(total.ptpc, total.calls / 10) << "the fp8 (ptpc) share of the soak";
  std::printf("  soak: %lld collective calls (%lld ptpc) over W = 2 and 4, each output checked on the device, %.1f s\n",
              total.calls, total.ptpc, secs);
}

// A calibration table (GemmAllReduceConfig::calibration): auto follows it per M where the op can
// run the mode (here fused at m = 128, where the model says split), self_test passes through that
// path; a table for another shape is kInvalidArgument at construction, an explicit mode with a
// table too, and ranks reading different tables are kMismatch on every rank.
TEST(EmulatedGemmAllReduce, CalibrationTableIsFollowedAndCheckedAtConstruction) {
  WEAVE_REQUIRE_GPUS(1);
  const std::string dir = std::filesystem::temp_directory_path().string();
  auto write = [&](const std::string& name, const std::string& rows, int64_t k) {
    const std::string path = dir + "/weave-cal-" + std::to_string(::getpid()) + "-" + name + ".txt";
    std::ofstream f(path);
    f << "weave-calibration 1\nop gemm-ar\nquant bf16\nn 256\nk " << k << "\nworld 2\nwhere test\n" << rows;
    return path;
  };
  const std::string good = write("good", "m 128 fused\nm 1024 split-lsa\n", 256);
  const std::string other = write("other", "m 128 split-lsa\n", 256);
  const std::string wrong_k = write("k", "m 128 fused\n", 512);
  bench::EmulatedWorld ew(2, 0, 10);
  ew.run([&](comm::Group& g) {
    auto cfg = config_of(kQuants[0], GemmAllReduceMode::kAuto, 256, 256, 1024);
    EXPECT_EQ(GemmAllReduce::Impl::create(g, cfg)->plan(128).mode, GemmAllReduceMode::kSplitLsa) << "the model";
    cfg.calibration = good;
    auto op = GemmAllReduce::Impl::create(g, cfg);
    const GemmAllReducePlan p = op->plan(128);
    EXPECT_EQ(p.mode, GemmAllReduceMode::kFused) << p.reason;
    EXPECT_NE(p.reason.find("measured fastest"), std::string::npos) << p.reason;
    const SelfTestReport rep = op->self_test(128);
    EXPECT_TRUE(rep.ok) << rep.detail;
    EXPECT_EQ(op->last_mode(), GemmAllReduceMode::kFused);
    auto bad = cfg;
    bad.calibration = wrong_k;
    EXPECT_NE(test::error_of([&] { GemmAllReduce::Impl::create(g, bad); }, Status::kInvalidArgument)
                  .find("is for another op shape: k 512 (this op: 256)"),
              std::string::npos);
    bad = cfg;
    bad.mode = GemmAllReduceMode::kFused;
    EXPECT_NE(test::error_of([&] { GemmAllReduce::Impl::create(g, bad); }, Status::kInvalidArgument)
                  .find("only mode auto consults a calibration"),
              std::string::npos);
    bad = cfg;
    bad.calibration = g.rank() == 0 ? good : other;
    EXPECT_NE(test::error_of([&] { GemmAllReduce::Impl::create(g, bad); }, Status::kMismatch).find("calibration"),
              std::string::npos);
  });
  for (const auto& p : {good, other, wrong_k}) std::filesystem::remove(p);
}

// run(m, a, b, scales, out, stream): the output copied into the caller's buffer after the call, on
// its stream. W = 2; fused, split-lsa, fused-rs, fused-ce and auto (decode at M = 1); M of one row,
// just over a decode batch and several bands: out (a row-strided column slice of a wider buffer,
// NaN-poisoned first) is the window's view bitwise and the closed form, the columns beside it
// untouched; the same from graphs replayed with changing A (fused, split-lsa, auto). Bad outs are kInvalidArgument naming
// 'out' and the rule, before any GPU work; the ranks stay in step (the next call is right).
TEST(EmulatedGemmAllReduce, CallerOutputIsTheWindowViewCopiedAfterTheCall) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 256, m_max = 600;
  const int world = 2;
  for (GemmAllReduceMode mode : {GemmAllReduceMode::kFused, GemmAllReduceMode::kSplitLsa, GemmAllReduceMode::kFusedRs,
                                 GemmAllReduceMode::kFusedCe, GemmAllReduceMode::kAuto}) {
    if (!fits_queues(mode, world)) {
      ADD_FAILURE() << mode_name(mode) << " not run at W2 in the emulated world";
      continue;
    }
    SCOPED_TRACE(mode_name(mode));
    bench::EmulatedWorld ew(world, 0, 20);
    ew.run([&](comm::Group& g) {
      const int dev = g.device(), r = g.rank();
      auto op = GemmAllReduce::Impl::create(g, config_of(kQuants[0], mode, n, k, m_max));
      OneHot oh(m_max, n, k, r);
      Stream st;
      const double bound = 2 * g.timeout_s() + 5;
      auto check_out = [&](const test::CallerOut& out, uint64_t seed, int64_t m, const std::string& what) {
        test::expect_out_is_the_window_view(*op, m, out, what);
        const std::vector<uint8_t> got = out.rows();
        std::vector<uint16_t> h(static_cast<size_t>(m * n));
        std::memcpy(h.data(), got.data(), got.size());
        EXPECT_EQ(oh.wrong(h, seed, world, m), 0) << what;
      };
      for (int64_t m : {1, 33, 600}) {
        const uint64_t seed = 40 + m;
        oh.set_a(seed, m);
        const test::CallerOut out(DType::kBF16, m, n, n + 3, dev);  // a row pitch of no particular alignment
        out.poison(st.s);
        g.barrier();
        op->run(m, oh.a_view(m, dev), oh.b_view(dev), {}, out.view, st.s);
        comm::sync_stream_bounded(st.s, bound, "a call with out");
        op->check();
        check_out(out, seed, m, "m " + std::to_string(m) + " (" + mode_name(op->last_mode()) + ")");
        g.barrier();  // nobody starts the next call while a peer still reads this one's output
      }
      // Graphs: [A variant -> the live A, the call with out], one per variant and rank, replayed in
      // turn with out poisoned before each replay. Modes the per-rank graph tests run (fused,
      // split-lsa; auto takes one of them here): fused-ce cannot run one graph per rank in the
      // emulated world (FusedCeGraphReplaysInOneGraphAcrossTheEpochWrap), fused-rs is not in them.
      const bool graphs = mode != GemmAllReduceMode::kFusedCe && mode != GemmAllReduceMode::kFusedRs;
      const int64_t m = 300;
      const test::CallerOut out(DType::kBF16, m, n, n + 24, dev);
      if (graphs)
        test::expect_out_graph_replays(
            g, *op, m, k, m_max, oh.b_view(dev), out, [&](uint64_t seed) { return oh.host_a(seed, m); }, check_out,
            dev, st.s, bound);
      // Bad outs, then a good call: every rank is still in step.
      g.barrier();
      const int peer = 1 - r;
      const GemmAllReduce::Impl& im = GemmAllReduce::Impl::of(*op);
      const char* peer_out = im.rt->window().handle().base[peer] + im.layout.out;
      oh.set_a(41, m);
      test::expect_refused_outs_then_a_good_call(g, *op, m, oh.a_view(m, dev), oh.b_view(dev), out, peer_out, peer, 41,
                                                 check_out, st.s, bound);
    });
  }
}

// Bad inputs: each a clear error naming the argument and the rule; N or K_r differing across ranks
// is a kMismatch at construction on every rank.
TEST(EmulatedGemmAllReduce, BadInputsAreClearErrors) {
  WEAVE_REQUIRE_GPUS(1);
  auto cfg = config_of(kQuants[0], GemmAllReduceMode::kFused, 256, 256, 256);
  EXPECT_NE(GemmAllReduce::validate(cfg, 9).find("world"), std::string::npos);
  auto c2 = cfg;
  c2.n = 100;
  EXPECT_NE(GemmAllReduce::validate(c2, 2).find("multiple of 8"), std::string::npos);
  c2 = cfg;
  c2.m_max = 0;
  EXPECT_NE(GemmAllReduce::validate(c2, 2).find("m_max"), std::string::npos);
  c2 = cfg;
  c2.chunks = 17;
  EXPECT_NE(GemmAllReduce::validate(c2, 2).find("chunks"), std::string::npos);
  bench::EmulatedWorld ew(2, 0, 5);
  for (int what = 0; what < 2; ++what)
    ew.run([&](comm::Group& g) {
      auto c = cfg;
      if (g.rank() == 1) (what == 0 ? c.n : c.k) = 512;
      const std::string msg = test::error_of([&] { GemmAllReduce::Impl::create(g, c); }, Status::kMismatch);
      EXPECT_NE(msg.find("GemmAllReduce configuration"), std::string::npos) << msg;
    });
  ew.run([&](comm::Group& g) {
    auto op = GemmAllReduce::Impl::create(g, cfg);
    OneHot oh(256, 256, 256, g.rank());
    Stream st;
    const int dev = g.device();
    std::string msg = test::error_of([&] { op->run(257, oh.a_view(256, dev), oh.b_view(dev), {}, st.s); });
    EXPECT_NE(msg.find("m_max"), std::string::npos) << msg;
    msg = test::error_of([&] { op->run(0, oh.a_view(256, dev), oh.b_view(dev), {}, st.s); });
    EXPECT_NE(msg.find("m must be"), std::string::npos) << msg;
    msg = test::error_of([&] { op->run(128, oh.a_view(256, dev), oh.b_view(dev), {}, st.s); });  // A has 256 rows
    EXPECT_NE(msg.find("'A'"), std::string::npos) << msg;
    msg = test::error_of(
        [&] { op->run(256, TensorView::matrix(oh.a.get(), DType::kE4M3, 256, 256, dev), oh.b_view(dev), {}, st.s); });
    EXPECT_NE(msg.find("'A'"), std::string::npos) << msg;
    test::expect_misaligned_a_b_named(*op, oh.a.get(), oh.b.get(), oh.a_view(256, dev), oh.b_view(dev), st.s);
    msg = test::error_of([&] { op->output(257); });
    EXPECT_NE(msg.find("m must be"), std::string::npos) << msg;
  });
  ew.run([&](comm::Group& g) {
    auto c = config_of(kQuants[3], GemmAllReduceMode::kFusedCe, 256, 256, 256);
    c.mx_route = MxRoute::kBf16;
    const std::string msg = test::error_of([&] { GemmAllReduce::Impl::create(g, c); }, Status::kInvalidArgument);
    EXPECT_NE(msg.find("mx_route = bf16 cannot run in mode fused-ce"), std::string::npos) << msg;
  });
}
