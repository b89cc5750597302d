// GemmAllGather in the emulated world (testing/emulated_world.hpp: W ranks as threads on one
// GPU, the same op code and kernels as over NCCL): every mode x quant x W through self_test, fused
// bitwise equal to split and both within tolerance of a reference GEMM that is not weave's kernel
// (per source rank), identical on every rank, negative controls for the arrival wait and the
// credit, a slow rank, back-to-back calls of changing M, graph replays across the epoch wrap, a
// peer that never arrives, a randomised soak, and bad inputs. The same op runs over NCCL windows
// on 2+ GPUs in the runs-on-2-GPUs issue.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/hash.hpp"
#include "fused/all_gather/impl.hpp"
#include "fused_test_support.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
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
  DType out;
  const char* name;
};
const QuantCase kQuants[] = {
    {ScaleMode::kBF16, ScaleLayout::kRaw, DType::kBF16, "bf16->bf16"},
    {ScaleMode::kBF16, ScaleLayout::kRaw, DType::kF32, "bf16->fp32"},
    {ScaleMode::kPtpc, ScaleLayout::kRaw, DType::kBF16, "ptpc"},
    {ScaleMode::kBlockscale, ScaleLayout::kRaw, DType::kBF16, "blockscale"},
    {ScaleMode::kMxfp8, ScaleLayout::kRaw, DType::kBF16, "mxfp8-raw"},
    {ScaleMode::kMxfp8, ScaleLayout::kPacked, DType::kBF16, "mxfp8-packed"},
    {ScaleMode::kBlockscale, ScaleLayout::kMnMajor, DType::kBF16, "blockscale-mn"},
};

GemmAllGatherConfig config_of(const QuantCase& q, GemmAllGatherMode mode, int64_t n, int64_t k, int64_t m_max) {
  GemmAllGatherConfig c;
  c.n = n;
  c.k = k;
  c.m_max = m_max;
  c.quant = q.quant;
  c.scale_layout = q.layout;
  c.out_dtype = q.out;
  c.mode = mode;
  return c;
}

// --- one-hot operands with closed-form outputs (bf16), for protocol tests ---
// Rank s's A row i is one-hot at col(seed, s, i); B[n, k] = small integers. Then
// out[s*m + i, j] = B[j, col(seed, s, i)] exactly.
int col_of(uint64_t seed, int s, int64_t i, int64_t k) { return static_cast<int>(mix64(seed * 7919 + s * 1000003ull + i) % k); }
float b_val(int64_t row, int64_t kk) { return static_cast<float>(static_cast<int>(mix64((row << 20) ^ kk) % 17) - 8); }

struct OneHot {
  int64_t m_max, n, k;
  bench::DeviceBuffer b;       // [n, k] bf16
  bench::DeviceBuffer a;       // [m_max, k] bf16 (this rank's current A)
  OneHot(int64_t m_max_, int64_t n_, int64_t k_) : m_max(m_max_), n(n_), k(k_), b(n_ * k_ * 2), a(m_max_ * k_ * 2) {
    std::vector<uint16_t> hb(n * k);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) hb[r * k + c] = ref::float_to_bf16(b_val(r, c));
    b.upload(hb.data(), hb.size() * 2);
  }
  std::vector<uint16_t> host_a(uint64_t seed, int rank, int64_t m) const {
    std::vector<uint16_t> ha(m_max * k, 0);
    const uint16_t one = ref::float_to_bf16(1.0f);
    for (int64_t i = 0; i < m; ++i) ha[i * k + col_of(seed, rank, i, k)] = one;
    return ha;
  }
  void set_a(uint64_t seed, int rank, int64_t m) {
    const auto ha = host_a(seed, rank, m);
    a.upload(ha.data(), ha.size() * 2);
  }
  TensorView a_view(int64_t m, int dev) const { return TensorView::matrix(a.get(), DType::kBF16, m, k, dev); }
  TensorView b_view(int dev) const { return TensorView::matrix(b.get(), DType::kBF16, n, k, dev); }
  // Wrong elements of out [world*m, n] of `dt` (bf16 or fp32; host bytes, dense rows), per source rank.
  std::vector<int64_t> wrong_bytes(const std::vector<uint8_t>& out, DType dt, uint64_t seed, int world, int64_t m) const {
    std::vector<int64_t> bad(world, 0);
    for (int s = 0; s < world; ++s)
      for (int64_t i = 0; i < m; ++i) {
        const int c = col_of(seed, s, i, k);
        for (int64_t j = 0; j < n; ++j) {
          const size_t e = static_cast<size_t>((s * m + i) * n + j);
          float v;
          if (dt == DType::kF32) {
            std::memcpy(&v, out.data() + 4 * e, 4);
          } else {
            uint16_t u;
            std::memcpy(&u, out.data() + 2 * e, 2);
            v = ref::bf16_to_float(u);
          }
          if (!(v == b_val(j, c))) ++bad[s];
        }
      }
    return bad;
  }
  // Wrong elements of out [world*m, n] bf16 (host copy), per source rank.
  std::vector<int64_t> wrong(const std::vector<uint16_t>& out, uint64_t seed, int world, int64_t m) const {
    std::vector<int64_t> bad(world, 0);
    for (int s = 0; s < world; ++s)
      for (int64_t i = 0; i < m; ++i) {
        const int c = col_of(seed, s, i, k);
        for (int64_t j = 0; j < n; ++j) {
          uint32_t u = static_cast<uint32_t>(out[(s * m + i) * n + j]) << 16;
          float v;
          std::memcpy(&v, &u, 4);
          if (!(v == b_val(j, c))) ++bad[s];
        }
      }
    return bad;
  }
};

// Device check of one call's bf16 output against the one-hot closed form, each gathered row r
// times row_scale[r] when given (ptpc's A scales; powers of two, so still exact); adds wrong counts.
__global__ void check_onehot_kernel(const uint16_t* out, const uint16_t* b, const int* cols, int64_t rows, int64_t n,
                                    int64_t k, unsigned long long* wrong, const float* row_scale = nullptr) {
  unsigned long long bad = 0;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < rows * n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / n, j = e % n;
    const uint16_t want = b[j * k + cols[r]];
    if (row_scale == nullptr) {
      if (out[e] != want) ++bad;
    } else if (__uint_as_float(uint32_t{out[e]} << 16) != __uint_as_float(uint32_t{want} << 16) * row_scale[r]) {
      ++bad;  // (NaN, i.e. never written, compares unequal)
    }
  }
  if (bad) atomicAdd(wrong, bad);
}

// ptpc one-hot operands (test::PtpcOneHot, with OneHot's B values): out[s*m + i, j] =
// B[j, col] * test::ptpc_row_scale(s, i) exactly.

}  // namespace

// Every mode x quant x world through self_test (known values, every source rank checked on every
// rank), at M of one row, a partial tile, one tile and many tiles.
TEST(EmulatedGemmAllGather, SelfTestEveryModeQuantAndWorld) {
  WEAVE_REQUIRE_GPUS(1);
  const GemmAllGatherMode modes[] = {GemmAllGatherMode::kSplitLsa, GemmAllGatherMode::kSplitCe,
                                     GemmAllGatherMode::kFusedLsa, GemmAllGatherMode::kFusedCe,
                                     GemmAllGatherMode::kAuto};
  int passed = 0;
  for (int world : {2, 4, 8}) {
    bench::EmulatedWorld ew(world, 0, 20);
    for (const QuantCase& q : kQuants)
      for (GemmAllGatherMode mode : modes) {
        if (!fits_queues(mode, world)) {  // said once per mode and world, not skipped silently
          if (&q == &kQuants[0])
            std::printf("  not run: %s at W%d: %s\n", mode_name(mode).c_str(), world,
                        bench::EmulatedWorld::copy_engine_unsupported_reason(world).c_str());
          continue;
        }
        SCOPED_TRACE(std::string(q.name) + " " + mode_name(mode) + " W" + std::to_string(world));
        ew.run([&](comm::Group& g) {
          auto op = GemmAllGather::Impl::create(g, config_of(q, mode, 256, 512, 1100));
          for (int64_t m : {1, 7, 128, 1000}) {
            const SelfTestReport rep = op->self_test(m);
            EXPECT_TRUE(rep.ok) << rep.detail;
            if (g.rank() == 0 && rep.ok) ++passed;
          }
        });
      }
  }
  std::printf("  GemmAllGather self-tests passed: %d (per world, rank 0 counted)\n", passed);
}

// self_test has teeth: gemm-only moves nothing, so every peer's rows stay poisoned.
TEST(EmulatedGemmAllGather, SelfTestFailsWhenNothingMoves) {
  WEAVE_REQUIRE_GPUS(1);
  bench::EmulatedWorld ew(2, 0, 10);
  ew.run([&](comm::Group& g) {
    auto op = GemmAllGather::Impl::create(g, config_of(kQuants[0], GemmAllGatherMode::kGemmOnly, 256, 512, 256));
    const SelfTestReport rep = op->self_test(200);
    EXPECT_FALSE(rep.ok) << rep.detail;
    EXPECT_EQ(rep.wrong_from_rank[g.rank()], 0) << "own rows are computed locally";
    EXPECT_GT(rep.wrong_from_rank[1 - g.rank()], 0) << "the peer's rows were never sent";
  });
}

// B must be identical on every rank, and nothing in the protocol notices a rank whose B differs:
// self_test(m, b, scale_b) fingerprints every rank's B (and scales) and fails on every rank,
// naming the rank outside the majority (W = 4), or reporting every fingerprint (W = 2: no
// majority). Control: the same B everywhere passes. One flipped bit of B (bf16) and one changed
// scale byte of scale_b (blockscale, values identical) are each caught.
TEST(EmulatedGemmAllGather, SelfTestNamesARankWhoseBDiffers) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 512, m_max = 256;
  const QuantCase* cases[] = {&kQuants[0], &kQuants[3]};
  for (int world : {2, 4}) {
    bench::EmulatedWorld ew(world, 0, 10);
    for (const QuantCase* q : cases)
      for (int odd : {-1, world - 1}) {  // -1: every rank the same B (the control)
        SCOPED_TRACE(std::string(q->name) + " W" + std::to_string(world) + " odd rank " + std::to_string(odd));
        ew.run([&](comm::Group& g) {
          auto op = GemmAllGather::Impl::create(g, config_of(*q, GemmAllGatherMode::kAuto, n, k, m_max));
          const bench::DeviceOperand b = bench::upload_operand(
              bench::quantize_parallel(bench::random_operand(77, n, k), n, k, q->quant, ref::Operand::kB), g.device());
          if (g.rank() == odd) {
            // bf16: flip one bit of one value of B; blockscale: change one byte of one scale.
            const bool bf16 = q->quant == ScaleMode::kBF16;
            char* p = static_cast<char*>(bf16 ? b.view.data : b.scale_view.data) + (bf16 ? 37 : 5);
            char byte = 0;
            WEAVE_CHECK_CUDA(cudaMemcpy(&byte, p, 1, cudaMemcpyDeviceToHost));
            byte ^= 0x01;
            WEAVE_CHECK_CUDA(cudaMemcpy(p, &byte, 1, cudaMemcpyHostToDevice));
          }
          const SelfTestReport rep = op->self_test(100, b.view, b.scale_view);
          if (odd < 0) {
            EXPECT_TRUE(rep.ok) << rep.detail;
            EXPECT_NE(rep.detail.find("identical on every rank"), std::string::npos) << rep.detail;
            return;
          }
          EXPECT_FALSE(rep.ok) << rep.detail;
          const std::string want = world > 2 ? "rank(s) " + std::to_string(odd) + " differ" : "no majority";
          EXPECT_NE(rep.detail.find(want), std::string::npos) << rep.detail;
          if (g.rank() == 0) std::printf("  %s W%d: %s\n", q->name, world, rep.detail.substr(0, 160).c_str());
        });
      }
  }
}

// Random operands: fused output bitwise equal to split-lsa's, identical on every rank, and every
// source rank's rows within the GEMM tolerance of gpu_reference_gemm (a plain CUDA-core GEMM).
// Every output NaN-poisoned before its call. W = 2 and 4 over every M; W = 8 (the lsa modes) at
// M = 1, 128 and 1000.
TEST(EmulatedGemmAllGather, FusedEqualsSplitBitwiseAndMatchesReferencePerSource) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 1024, m_max = 8192;
  std::mt19937_64 rng(20261201);
  std::vector<int64_t> ms = {1, 7, 128, 1000, 2048, 8192, 1 + static_cast<int64_t>(rng() % 8000)};
  for (int world : {2, 4, 8}) {
    if (!fits_queues(GemmAllGatherMode::kFusedLsa, world)) {
      ADD_FAILURE() << "W" << world << " not run: " << 2 * world << " streams exceed the hardware queues";
      continue;
    }
    bench::EmulatedWorld ew(world, 0, 20);
    for (const QuantCase& q : kQuants) {
      SCOPED_TRACE(std::string(q.name) + " W" + std::to_string(world));
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        auto fused = GemmAllGather::Impl::create(g, config_of(q, GemmAllGatherMode::kFusedLsa, n, k, m_max));
        auto split = GemmAllGather::Impl::create(g, config_of(q, GemmAllGatherMode::kSplitLsa, n, k, m_max));
        // fused-ce where the emulated world can run copy streams (W = 2): also bitwise equal. fused-ce
        // always runs mxfp8 on the native kernel (no bf16 route), while split's auto takes the route
        // where the planner's model says so (M = 128 here): the route's bits differ from the native
        // kernel's (it is more accurate), so mxfp8's fused-ce is held to a split pinned to native.
        std::unique_ptr<GemmAllGather> pull, split_native;
        if (fits_queues(GemmAllGatherMode::kFusedCe, world)) {
          pull = GemmAllGather::Impl::create(g, config_of(q, GemmAllGatherMode::kFusedCe, n, k, m_max));
          if (q.quant == ScaleMode::kMxfp8) {
            GemmAllGatherConfig c = config_of(q, GemmAllGatherMode::kSplitLsa, n, k, m_max);
            c.mx_route = MxRoute::kNative;
            split_native = GemmAllGather::Impl::create(g, c);
          }
        }
        const auto bq = bench::quantize_parallel(bench::random_operand(77, n, k), n, k, q.quant, ref::Operand::kB);
        const bench::DeviceOperand b = bench::upload_operand(bq, dev);
        Stream st;
        const size_t ob = q.out == DType::kF32 ? 4 : 2;
        for (int64_t m : ms) {
          if (world == 8 && m != 1 && m != 128 && m != 1000) continue;
          std::vector<bench::DeviceOperand> as;  // every source rank's A (this rank regenerates them)
          for (int s = 0; s < world; ++s)
            as.push_back(bench::upload_operand(
                bench::quantize_parallel(bench::random_operand(1000 + 17 * s + m, m, k), m, k, q.quant, ref::Operand::kA),
                dev));
          test::LayoutScales held;
          GemmScales sc = test::scales_in_layout(q.layout, as[r], b, held);
          const size_t bytes = static_cast<size_t>(world * m * n) * ob;
          // One op's call at a time across the ranks, its output NaN-poisoned first
          // (test::poisoned_call): back-to-back calls of two ops at W = 4 were seen to stall in the
          // emulated world (testing/emulated_world.hpp "Queues"); this test is about numerics,
          // back-to-back calls are BackToBack's and the soak's.
          const std::vector<uint8_t> hf = test::poisoned_call(g, *fused, m, as[r].view, b.view, sc, bytes, st.s);
          const std::vector<uint8_t> hs = test::poisoned_call(g, *split, m, as[r].view, b.view, sc, bytes, st.s);
          EXPECT_EQ(fused->last_mode(), GemmAllGatherMode::kFusedLsa);
          EXPECT_EQ(std::memcmp(hf.data(), hs.data(), bytes), 0)
              << q.name << " W" << world << " m " << m << ": fused differs from split";
          if (pull) {
            const std::vector<uint8_t> hp = test::poisoned_call(g, *pull, m, as[r].view, b.view, sc, bytes, st.s);
            EXPECT_EQ(pull->last_mode(), GemmAllGatherMode::kFusedCe);
            const std::vector<uint8_t> hn =
                split_native ? test::poisoned_call(g, *split_native, m, as[r].view, b.view, sc, bytes, st.s) : hs;
            size_t first = 0;
            while (first < bytes && hp[first] == hn[first]) ++first;
            EXPECT_EQ(first, bytes) << q.name << " W" << world << " m " << m << ": fused-ce differs from split"
                                    << (split_native ? " (native)" : "") << " from byte "
                                    << first << " (row " << first / ob / n << " of " << world * m << ", column "
                                    << first / ob % n << ")";
          }
          const auto hashes = g.all_gather(fnv1a64(hf.data(), bytes), "the output hash");
          for (int s = 1; s < world; ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": rank " << s << " differs";
          // Per source rank against the reference GEMM (rows the call never wrote are still NaN).
          bench::DeviceBuffer fused_out(bytes), refbuf(static_cast<size_t>(m * n) * 4);
          fused_out.upload(hf.data(), bytes);
          const GemmProblem p{.m = m, .n = n, .k = k, .mode = q.quant, .scale_layout = ScaleLayout::kRaw, .out_dtype = q.out};
          for (int s = 0; s < world; ++s) {
            bench::gpu_reference_gemm(p, as[s].view, b.view, GemmScales{as[s].scale_view, b.scale_view},
                                      refbuf.as<float>(), st.s);
            const TensorView rows = TensorView::matrix(static_cast<char*>(fused_out.get()) + s * m * n * ob, q.out, m, n, dev);
            const ref::Comparison cmp = bench::gpu_compare(rows, refbuf.as<float>(), bench::gemm_tolerance(q.quant, q.out), st.s);
            EXPECT_EQ(cmp.wrong, 0) << "m " << m << " source rank " << s << ": " << cmp.wrong << " of " << cmp.count
                                    << " wrong (never written " << cmp.never_written << ", first at " << cmp.first_wrong
                                    << "), rel_l2 " << cmp.rel_l2;
            EXPECT_LT(cmp.rel_l2, test::kFusedRelL2Bound) << "m " << m << " source rank " << s;  // issue 36 item 12
          }
          g.barrier();  // nobody starts the next m while a peer still reads this one's output
        }
      });
    }
  }
}

// mxfp8's bf16 route in the fused operator (fused/mx_route.hpp): every rank converts and runs the
// bf16 kernel, except a rank whose A holds scales the conversion cannot carry exactly (bytes 5 on
// non-zero elements): its conversion sets the flag and its native kernel runs instead, decided on
// the GPU before any tile leaves. Per source: the rows of the odd rank are bitwise the native op's
// and the others' bitwise the route op's; fused equals split bitwise; every rank's output
// identical; every source within the GEMM tolerance of the reference.
TEST(EmulatedGemmAllGather, Mxfp8RouteIsEitherOrPerRankBeforeAnyTileLeaves) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 512, m_max = 1000;
  const QuantCase& q = kQuants[4];  // mxfp8 raw
  for (int world : {2, 4})
    for (int odd : {-1, world - 1}) {  // -1: every rank on the route
      SCOPED_TRACE("W" + std::to_string(world) + " odd rank " + std::to_string(odd));
      bench::EmulatedWorld ew(world, 0, 20);
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        auto with = [&](GemmAllGatherMode mode, MxRoute route) {
          auto c = config_of(q, mode, n, k, m_max);
          c.mx_route = route;
          return GemmAllGather::Impl::create(g, c);
        };
        auto fused = with(GemmAllGatherMode::kFusedLsa, MxRoute::kBf16);
        auto split = with(GemmAllGatherMode::kSplitLsa, MxRoute::kBf16);
        auto native = with(GemmAllGatherMode::kFusedLsa, MxRoute::kNative);
        const bench::DeviceOperand b = bench::upload_operand(
            bench::quantize_parallel(bench::random_operand(78, n, k), n, k, q.quant, ref::Operand::kB), dev);
        Stream st;
        for (int64_t m : {7, 1000}) {
          const auto as = test::mx_a_with_odd_rank(world, odd, m, k, 3000, dev);
          const GemmScales sc{as[r].scale_view, b.scale_view};
          const size_t row_bytes = static_cast<size_t>(m * n) * 2, bytes = world * row_bytes;
          std::vector<std::vector<uint8_t>> outs;
          for (GemmAllGather* op : {fused.get(), split.get(), native.get()})
            outs.push_back(test::poisoned_call(g, *op, m, as[r].view, b.view, sc, bytes, st.s));
          EXPECT_TRUE(GemmAllGather::Impl::of(*fused).last_mx_bf16_route);
          EXPECT_FALSE(GemmAllGather::Impl::of(*native).last_mx_bf16_route);
          EXPECT_EQ(outs[0], outs[1]) << "m " << m << ": fused differs from split on the same route";
          // Which kernel computed each source's rows: the odd rank's are the native op's bits.
          bench::DeviceBuffer refbuf(static_cast<size_t>(m * n) * 4), rows_buf(row_bytes);
          const GemmProblem p{.m = m, .n = n, .k = k, .mode = q.quant, .scale_layout = ScaleLayout::kRaw, .out_dtype = q.out};
          int differing_sources = 0;
          for (int s = 0; s < world; ++s) {
            const uint8_t* fr = outs[0].data() + s * row_bytes;
            const uint8_t* nr = outs[2].data() + s * row_bytes;
            const bool same_as_native = std::memcmp(fr, nr, row_bytes) == 0;
            if (s == odd) EXPECT_TRUE(same_as_native) << "m " << m << ": the odd rank's rows are not the native kernel's";
            else differing_sources += same_as_native ? 0 : 1;
            rows_buf.upload(fr, row_bytes);
            bench::gpu_reference_gemm(p, as[s].view, b.view, GemmScales{as[s].scale_view, b.scale_view},
                                      refbuf.as<float>(), st.s);
            const ref::Comparison cmp = bench::gpu_compare(TensorView::matrix(rows_buf.get(), q.out, m, n, dev),
                                                           refbuf.as<float>(), bench::gemm_tolerance(q.quant, q.out), st.s);
            EXPECT_EQ(cmp.wrong, 0) << "m " << m << " source " << s << ": " << cmp.wrong << " wrong, rel_l2 " << cmp.rel_l2;
          }
          // The route's rows differ from the native kernel's somewhere (else the check above says nothing).
          if (m == 1000) EXPECT_GT(differing_sources, 0) << "the route and the native kernel gave the same bits";
          const auto hashes = g.all_gather(fnv1a64(outs[0].data(), bytes), "the output hash");
          for (int s = 1; s < world; ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": rank " << s << " differs";
        }
      });
    }
}

// The guard's negative control: rank 1 runs both kernels of the either/or (mx_route_unguarded), so
// it makes two protocol calls where its peer makes one: its second kernel's credit wait must time
// out, naming the peer, and the op report it. Guarded (the control), the same calls are clean.
TEST(EmulatedGemmAllGather, Mxfp8RouteWithoutItsGuardsIsCaught) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 512, m = 300;
  for (bool unguarded : {false, true}) {
    bench::EmulatedWorld ew(2, 0, 1.0);
    std::vector<std::string> errors(2);
    ew.run([&](comm::Group& g) {
      auto c = config_of(kQuants[4], GemmAllGatherMode::kFusedLsa, n, k, m);
      c.mx_route = MxRoute::kBf16;
      c.mx_route_unguarded = unguarded && g.rank() == 1;
      auto op = GemmAllGather::Impl::create(g, c);
      const auto as = test::mx_a_with_odd_rank(2, -1, m, k, 3000, g.device());
      const bench::DeviceOperand b = bench::upload_operand(
          bench::quantize_parallel(bench::random_operand(78, n, k), n, k, ScaleMode::kMxfp8, ref::Operand::kB), g.device());
      Stream st;
      g.barrier();
      op->run(m, as[g.rank()].view, b.view, GemmScales{as[g.rank()].scale_view, b.scale_view}, st.s);
      comm::sync_stream_bounded(st.s, 10, "an mxfp8 call");
      try {
        op->check();
      } catch (const Error& e) {
        errors[g.rank()] = e.what();
        EXPECT_EQ(e.status(), Status::kTimeout) << e.what();
      }
    });
    if (!unguarded) {
      EXPECT_EQ(errors[0] + errors[1], "") << "guarded: every rank runs exactly one kernel";
    } else {
      EXPECT_NE(errors[1].find("peer 0"), std::string::npos) << "unguarded: rank 1's second kernel must time out: '"
                                                              << errors[1] << "'";
      std::printf("  route guards OFF on rank 1: %s\n", errors[1].substr(0, 200).c_str());
    }
  }
}

// Negative control of the arrival wait: rank 1 is slow (each tile's stores 20 ms late); rank 0
// reads its output as soon as its own kernel ends. With the wait: 0 wrong. Without it
// (skip_arrival_wait): rank 1's rows are still poison on rank 0.
// fused-ce: skipping the wait stores every pull trigger at once, so the copies read the slow rank's
// rows before its tiles are there.
TEST(EmulatedGemmAllGather, SkippingTheArrivalWaitIsCaught) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 256, m = 256;
  for (GemmAllGatherMode mode : {GemmAllGatherMode::kFusedLsa, GemmAllGatherMode::kFusedCe})
  for (bool skip : {false, true}) {
    SCOPED_TRACE(mode_name(mode));
    bench::EmulatedWorld ew(2, 0, 20);
    std::vector<int64_t> wrong_peer(2, 0);
    ew.run([&](comm::Group& g) {
      auto cfg = config_of(kQuants[0], mode, n, k, m);
      cfg.skip_arrival_wait = skip;
      if (g.rank() == 1) cfg.delay_stores_ns = 20'000'000;
      auto op = GemmAllGather::Impl::create(g, cfg);
      OneHot oh(m, n, k);
      oh.set_a(5, g.rank(), m);
      Stream st;
      WEAVE_CHECK_CUDA(cudaMemsetAsync(op->output(m).data, 0xFF, 2 * m * n * 2, st.s));
      WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
      g.barrier();
      // Snapshot the output on the device right after this rank's kernel (stream order, no host
      // timing involved), then look at it.
      bench::DeviceBuffer snapshot(2 * m * n * 2);
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues")
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(snapshot.get(), op->output(m).data, snapshot.bytes(), cudaMemcpyDeviceToDevice, st.s));
      WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
      std::vector<uint16_t> out(2 * m * n);
      snapshot.download(out.data(), snapshot.bytes());
      wrong_peer[g.rank()] = oh.wrong(out, 5, 2, m)[1 - g.rank()];
      g.barrier();
    });
    if (skip) EXPECT_GT(wrong_peer[0], 0) << "skipping the arrival wait must leave the slow peer's rows missing";
    else EXPECT_EQ(wrong_peer[0] + wrong_peer[1], 0) << "with the arrival wait every row is there";
    std::printf("  %s, arrival wait %s: rank 0 saw %lld wrong elements of the slow rank's rows\n",
                mode_name(mode).c_str(), skip ? "SKIPPED" : "on", static_cast<long long>(wrong_peer[0]));
  }
}

// Negative control of the credit, per fused mode. fused-lsa: rank 0 reads call 1's output 30 ms
// after its kernel (a slow consumer) while rank 1 goes straight on to call 2 with other values;
// with credits rank 1's call 2 waits for rank 0 to start call 2, without (flow_control = false)
// call 2's rows overwrite what rank 0 has not read yet. fused-ce: the credit protects the SENDER's
// own rows, which its peers pull during their call: rank 0 pulls slowly (each chunk's trigger 30 ms
// late); with credits rank 1's call 2 waits until rank 0's call 2 starts, i.e. until its call-1
// pulls ended; without, rank 1 overwrites its rows before rank 0 pulled them.
TEST(EmulatedGemmAllGather, DisablingTheCreditIsCaught) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 256, m = 256;
  ASSERT_TRUE(fits_queues(GemmAllGatherMode::kFusedCe, 2)) << bench::EmulatedWorld::copy_engine_unsupported_reason(2);
  for (GemmAllGatherMode mode : {GemmAllGatherMode::kFusedLsa, GemmAllGatherMode::kFusedCe})
  for (bool credits : {true, false}) {
    SCOPED_TRACE(mode_name(mode));
    const bool pull = mode == GemmAllGatherMode::kFusedCe;
    bench::EmulatedWorld ew(2, 0, 20);
    int64_t wrong = 0;
    ew.run([&](comm::Group& g) {
      auto cfg = config_of(kQuants[0], mode, n, k, m);
      cfg.flow_control = credits;
      if (pull && g.rank() == 0) cfg.delay_pull_ns = 30'000'000;
      auto op = GemmAllGather::Impl::create(g, cfg);
      OneHot oh(m, n, k);
      Stream st;
      bench::DeviceBuffer a2(m * k * 2), snapshot(2 * m * n * 2);
      const auto h2 = oh.host_a(6, g.rank(), m);
      a2.upload(h2.data(), h2.size() * 2);
      oh.set_a(5, g.rank(), m);
      g.barrier();
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues"); the GPU is not synchronised
      if (g.rank() == 0) {
        if (!pull) bench::spin_delay(30'000'000, st.s);
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(snapshot.get(), op->output(m).data, 2 * m * n * 2, cudaMemcpyDeviceToDevice, st.s));
      }
      op->run(m, TensorView::matrix(a2.get(), DType::kBF16, m, k, g.device()), oh.b_view(g.device()), {}, st.s);
      comm::sync_stream_bounded(st.s, 20, "two calls");
      op->check();
      if (g.rank() == 0) {
        std::vector<uint16_t> h(2 * m * n);
        snapshot.download(h.data(), h.size() * 2);
        wrong = oh.wrong(h, 5, 2, m)[1];
      }
      g.barrier();
    });
    if (credits) EXPECT_EQ(wrong, 0) << "with credits the slow reader sees call 1's rows";
    else EXPECT_GT(wrong, 0) << "without credits the next call must overwrite rows not yet read";
    std::printf("  %s, credits %s: the slow %s saw %lld wrong elements\n", mode_name(mode).c_str(), credits ? "on" : "OFF",
                pull ? "puller" : "reader", static_cast<long long>(wrong));
  }
}

// Back-to-back calls of changing M (and mode, for auto) on one op, no host sync between them, a
// slow rank; every call's output snapshotted on the device and checked at the end.
TEST(EmulatedGemmAllGather, BackToBackCallsOfChangingMWithASlowRank) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 512, m_max = 1100;
  const std::vector<int64_t> ms = {1000, 7, 128, 1, 640, 1100, 300};
  for (GemmAllGatherMode mode : {GemmAllGatherMode::kFusedLsa, GemmAllGatherMode::kSplitLsa, GemmAllGatherMode::kAuto,
                                 GemmAllGatherMode::kFusedCe}) {
    const int world = fits_queues(mode, 4) ? 4 : 2;  // fused-ce: W = 2 (copy streams, "Queues")
    bench::EmulatedWorld ew(world, 0, 20);
    SCOPED_TRACE(mode_name(mode) + " W" + std::to_string(world));
    ew.run([&](comm::Group& g) {
      auto cfg = config_of(kQuants[0], mode, n, k, m_max);
      if (g.rank() == world / 2) cfg.delay_stores_ns = 200'000;
      if (g.rank() == 0) cfg.delay_pull_ns = 100'000;  // fused-ce: a slow puller too
      auto op = GemmAllGather::Impl::create(g, cfg);
      OneHot oh(m_max, n, k);
      Stream st;
      std::vector<bench::DeviceBuffer> as, snaps;
      for (size_t c = 0; c < ms.size(); ++c) {
        const auto h = oh.host_a(100 + c, g.rank(), ms[c]);
        as.emplace_back(m_max * k * 2);
        as.back().upload(h.data(), h.size() * 2);
        snaps.emplace_back(world * ms[c] * n * 2);
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
        std::vector<uint16_t> h(world * ms[c] * n);
        snaps[c].download(h.data(), h.size() * 2);
        const auto bad = oh.wrong(h, 100 + c, world, ms[c]);
        for (int s = 0; s < world; ++s)
          EXPECT_EQ(bad[s], 0) << "rank " << g.rank() << " call " << c << " (m " << ms[c] << "): source " << s;
      }
      g.barrier();
    });
  }
}

// Graph replay: each rank captures [input variant copy -> run -> device check] per variant, for
// two M on one op; 1000 replays in an interleaved order, epochs started 50 calls before the 2^32
// wrap; #wrong accumulated on the device.
TEST(EmulatedGemmAllGather, GraphReplaysAcrossTheEpochWrapWithChangingInputs) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 256, m_max = 512;
  const int world = 2, variants = 5, replays = 1000;
  const int64_t graph_ms[2] = {512, 77};
  for (GemmAllGatherMode mode : {GemmAllGatherMode::kFusedLsa, GemmAllGatherMode::kSplitLsa, GemmAllGatherMode::kFusedCe}) {
    bench::EmulatedWorld ew(world, 0, 20);
    SCOPED_TRACE(mode_name(mode));
    ew.run([&](comm::Group& g) {
      auto cfg = config_of(kQuants[0], mode, n, k, m_max);
      cfg.initial_epoch = 0xFFFFFFFFu - 50u;
      auto op = GemmAllGather::Impl::create(g, cfg);
      OneHot oh(m_max, n, k);
      Stream st;
      bench::DeviceBuffer wrong(8), a_live(m_max * k * 2);
      WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, 8));
      std::vector<bench::DeviceBuffer> a_var, cols;
      std::vector<cudaGraphExec_t> execs;
      for (int gi = 0; gi < 2; ++gi)
        for (int v = 0; v < variants; ++v) {
          const int64_t m = graph_ms[gi];
          const uint64_t seed = 500 + 10 * gi + v;
          const auto h = oh.host_a(seed, g.rank(), m);
          a_var.emplace_back(m_max * k * 2);
          a_var.back().upload(h.data(), h.size() * 2);
          std::vector<int> hc(world * m);
          for (int s = 0; s < world; ++s)
            for (int64_t i = 0; i < m; ++i) hc[s * m + i] = col_of(seed, s, i, k);
          cols.emplace_back(hc.size() * 4);
          cols.back().upload(hc.data(), hc.size() * 4);
          cudaGraph_t graph;
          WEAVE_CHECK_CUDA(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal));
          WEAVE_CHECK_CUDA(cudaMemcpyAsync(a_live.get(), a_var.back().get(), m * k * 2, cudaMemcpyDeviceToDevice, st.s));
          op->run(m, TensorView::matrix(a_live.get(), DType::kBF16, m, k, g.device()), oh.b_view(g.device()), {}, st.s);
          check_onehot_kernel<<<64, 256, 0, st.s>>>(static_cast<const uint16_t*>(op->output(m).data),
                                                    oh.b.as<uint16_t>(), cols.back().as<int>(), world * m, n, k,
                                                    wrong.as<unsigned long long>());
          WEAVE_CHECK_CUDA(cudaStreamEndCapture(st.s, &graph));
          cudaGraphExec_t exec;
          WEAVE_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
          WEAVE_CHECK_CUDA(cudaGraphDestroy(graph));
          execs.push_back(exec);
        }
      g.barrier();
      // The same pseudo-random order on every rank (every rank must make the same calls).
      std::mt19937 order(99);
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

// A peer that never makes the call: the others' waits end after the timeout with a named error
// (rank, peer, flag, expected, seen), the kernel completes, and the op reports kTimeout.
TEST(EmulatedGemmAllGather, APeerThatNeverArrivesTimesOutNamingIt) {
  WEAVE_REQUIRE_GPUS(1);
  for (GemmAllGatherMode mode : {GemmAllGatherMode::kFusedLsa, GemmAllGatherMode::kSplitLsa, GemmAllGatherMode::kFusedCe}) {
    bench::EmulatedWorld ew(2, 0, 1.0);
    SCOPED_TRACE(mode_name(mode));
    ew.run([&](comm::Group& g) {
      auto op = GemmAllGather::Impl::create(g, config_of(kQuants[0], mode, 256, 256, 256));
      OneHot oh(256, 256, 256);
      oh.set_a(1, g.rank(), 256);
      g.barrier();
      if (g.rank() == 0) {
        Stream st;
        op->run(256, oh.a_view(256, g.device()), oh.b_view(g.device()), {}, st.s);
        comm::sync_stream_bounded(st.s, 10, "the call whose peer never arrives");
        const std::string msg = test::error_of([&] { op->check(); }, Status::kTimeout);
        test::expect_first_call_timeout_names_everything(msg, 0, 1);  // rank, peer, flag, expected, seen
        std::printf("  %s: %s\n", mode_name(mode).c_str(), msg.c_str());
        // The op refuses further calls.
        EXPECT_EQ(test::error_of([&] { op->run(256, oh.a_view(256, g.device()), oh.b_view(g.device()), {}, st.s); },
                                 Status::kTimeout)
                      .empty(),
                  false);
      }
    });
  }
}

// Issue 36 item 3: ranks that call one fused call with m = 1000 and 1001 (rank r's rows land at
// r x m in every peer) get kMismatch on every rank naming both m, found with the credit before any
// store to a peer (docs/memory_ordering.md "call-key"); with the credit off (a testing hook), on
// the arrival flags after the stores.
TEST(EmulatedGemmAllGather, RanksThatDisagreeOnMAreAMismatchOnEveryRank) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 256, m_max = 1100;
  for (GemmAllGatherMode mode : {GemmAllGatherMode::kFusedLsa, GemmAllGatherMode::kFusedCe})
    for (bool credit : {true, false}) {
      if (!fits_queues(mode, 2)) {
        ADD_FAILURE() << mode_name(mode) << " not run: " << bench::EmulatedWorld::copy_engine_unsupported_reason(2);
        continue;
      }
      SCOPED_TRACE(mode_name(mode) + (credit ? "" : ", credit off"));
      bench::EmulatedWorld ew(2, 0, 2.0);
      ew.run([&](comm::Group& g) {
        auto cfg = config_of(kQuants[0], mode, n, k, m_max);
        cfg.flow_control = credit;
        auto op = GemmAllGather::Impl::create(g, cfg);
        const int64_t m = 1000 + g.rank();
        OneHot oh(m_max, n, k);
        oh.set_a(3, g.rank(), m);
        Stream st;
        g.barrier();
        op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
        g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues")
        comm::sync_stream_bounded(st.s, 20, "the call of disagreeing m");
        const std::string msg = test::error_of([&] { op->check(); }, Status::kMismatch);
        EXPECT_NE(msg.find("m = " + std::to_string(m)), std::string::npos) << msg;
        EXPECT_NE(msg.find("m = " + std::to_string(2001 - m)), std::string::npos) << "the peer's m: " << msg;
        if (g.rank() == 0) std::printf("  %s%s: %s\n", mode_name(mode).c_str(), credit ? "" : " (credit off)", msg.c_str());
        g.barrier();
      });
    }
}

// >= 10,000 randomised collective calls (a call = every rank's run() of one op) over W = 2 and 4:
// mode (fused-lsa, auto, fused-ce at W = 2 where copy streams fit), quant (bf16 and ptpc with
// power-of-two row scales), M, a late rank; every output checked on the device against its closed
// form and every call counted. Small (N = K = 128, M <= 300): the protocol is what is soaked.
TEST(EmulatedGemmAllGather, RandomisedSoak) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 128, k = 128, m_max = 300;
  const int calls_per_world = 5000;
  const QuantCase& ptpc = kQuants[2];
  ASSERT_EQ(ptpc.quant, ScaleMode::kPtpc);
  long long calls = 0, ptpc_calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int world : {2, 4}) {
    bench::EmulatedWorld ew(world, 0, 30);
    ew.run([&](comm::Group& g) {
      const int dev = g.device();
      std::vector<std::unique_ptr<GemmAllGather>> owned;
      owned.push_back(GemmAllGather::Impl::create(g, config_of(kQuants[0], GemmAllGatherMode::kFusedLsa, n, k, m_max)));
      owned.push_back(GemmAllGather::Impl::create(g, config_of(kQuants[0], GemmAllGatherMode::kAuto, n, k, m_max)));
      owned.push_back(GemmAllGather::Impl::create(g, config_of(ptpc, GemmAllGatherMode::kFusedLsa, n, k, m_max)));
      if (world == 2)
        owned.push_back(GemmAllGather::Impl::create(g, config_of(ptpc, GemmAllGatherMode::kAuto, n, k, m_max)));
      if (fits_queues(GemmAllGatherMode::kFusedCe, world))  // copy streams fit the emulated world at W = 2
        owned.push_back(GemmAllGather::Impl::create(g, config_of(kQuants[0], GemmAllGatherMode::kFusedCe, n, k, m_max)));
      OneHot oh(m_max, n, k);
      const test::PtpcOneHot pt(g.rank(), m_max, n, k, b_val);
      Stream st;
      bench::DeviceBuffer wrong(8);
      WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, 8));
      constexpr int kVariants = 16;
      std::vector<bench::DeviceBuffer> a_var, a8_var, cols, row_scales;
      std::vector<int64_t> var_m;
      std::mt19937_64 shared_rng(4242 + world);  // the same sequence on every rank
      for (int v = 0; v < kVariants; ++v) {
        const int64_t m = 1 + static_cast<int64_t>(shared_rng() % m_max);
        var_m.push_back(m);
        const auto h = oh.host_a(900 + v, g.rank(), m);
        a_var.emplace_back(m_max * k * 2);
        a_var.back().upload(h.data(), h.size() * 2);
        const auto h8 = test::PtpcOneHot::host_a(h);
        a8_var.emplace_back(m_max * k);
        a8_var.back().upload(h8.data(), h8.size());
        std::vector<int> hc(world * m);
        std::vector<float> hs(world * m);
        for (int s = 0; s < world; ++s)
          for (int64_t i = 0; i < m; ++i) {
            hc[s * m + i] = col_of(900 + v, s, i, k);
            hs[s * m + i] = test::ptpc_row_scale(s, i);
          }
        cols.emplace_back(hc.size() * 4);
        cols.back().upload(hc.data(), hc.size() * 4);
        row_scales.emplace_back(hs.size() * 4);
        row_scales.back().upload(hs.data(), hs.size() * 4);
      }
      long long my_calls = 0, my_ptpc = 0;
      g.barrier();
      for (int i = 0; i < calls_per_world; ++i) {
        const int v = static_cast<int>(shared_rng() % kVariants);
        GemmAllGather* op = owned[shared_rng() % owned.size()].get();
        if (g.rank() == static_cast<int>(shared_rng() % world) && (i % 7) == 0) bench::spin_delay(20'000, st.s);
        const int64_t m = var_m[v];
        const bool fp8 = op->config().quant == ScaleMode::kPtpc;
        if (fp8)
          op->run(m, TensorView::matrix(a8_var[v].get(), DType::kE4M3, m, k, dev), pt.b_view(dev), pt.scales(m, dev),
                  st.s);
        else
          op->run(m, TensorView::matrix(a_var[v].get(), DType::kBF16, m, k, dev), oh.b_view(dev), {}, st.s);
        ++my_calls;
        my_ptpc += fp8 ? 1 : 0;
        g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues"); the GPU is not synchronised
        check_onehot_kernel<<<32, 256, 0, st.s>>>(static_cast<const uint16_t*>(op->output(m).data), oh.b.as<uint16_t>(),
                                                  cols[v].as<int>(), world * m, n, k, wrong.as<unsigned long long>(),
                                                  fp8 ? row_scales[v].as<float>() : nullptr);
        WEAVE_CHECK_LAUNCH();
        if (i % 256 == 255) comm::sync_stream_bounded(st.s, 60, "soak batch");
      }
      comm::sync_stream_bounded(st.s, 60, "soak");
      for (const auto& op : owned) op->check();
      unsigned long long bad = 0;
      wrong.download(&bad, 8);
      EXPECT_EQ(bad, 0ull) << "rank " << g.rank() << " W" << world;
      EXPECT_EQ(my_calls, calls_per_world) << "rank " << g.rank() << " W" << world;
      // Every rank made the same calls (the shared sequence): a rank that skipped one would have
      // stalled its peers, but count them anyway.
      const auto all = g.all_gather(static_cast<uint64_t>(my_calls), "the soak's call count");
      for (int s = 0; s < world; ++s) EXPECT_EQ(all[s], all[0]) << "rank " << s << " W" << world;
      if (g.rank() == 0) {
        calls += my_calls;
        ptpc_calls += my_ptpc;
      }
      g.barrier();
    });
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(calls, 10'000) << "collective calls over W = 2 and 4";
  EXPECT_GT(ptpc_calls, calls / 10) << "the fp8 (ptpc) share of the soak";
  std::printf("  soak: %lld collective calls (%lld ptpc) over W = 2 and 4, each output checked on the device, %.1f s\n",
              calls, ptpc_calls, secs);
}

// A calibration table (GemmAllGatherConfig::calibration): auto follows it (fused-lsa at m = 100,
// where the model says split), self_test passes through that path; an out dtype other than the
// table's is kInvalidArgument at construction; ranks reading different tables are kMismatch.
TEST(EmulatedGemmAllGather, CalibrationTableIsFollowedAndCheckedAtConstruction) {
  WEAVE_REQUIRE_GPUS(1);
  const std::string dir = std::filesystem::temp_directory_path().string();
  auto write = [&](const std::string& name, const std::string& rows) {
    const std::string path = dir + "/weave-cal-ag-" + std::to_string(::getpid()) + "-" + name + ".txt";
    std::ofstream f(path);
    f << "weave-calibration 1\nop gemm-ag\nquant bf16\nout bf16\nn 256\nk 256\nworld 2\nwhere test\n" << rows;
    return path;
  };
  const std::string good = write("good", "m 100 fused-lsa\n"), other = write("other", "m 100 split-lsa\n");
  bench::EmulatedWorld ew(2, 0, 10);
  ew.run([&](comm::Group& g) {
    auto cfg = config_of(kQuants[0], GemmAllGatherMode::kAuto, 256, 256, 256);
    EXPECT_EQ(GemmAllGather::Impl::create(g, cfg)->plan(100).mode, GemmAllGatherMode::kSplitLsa) << "the model";
    cfg.calibration = good;
    auto op = GemmAllGather::Impl::create(g, cfg);
    EXPECT_EQ(op->plan(100).mode, GemmAllGatherMode::kFusedLsa) << op->plan(100).reason;
    const SelfTestReport rep = op->self_test(100);
    EXPECT_TRUE(rep.ok) << rep.detail;
    EXPECT_EQ(op->last_mode(), GemmAllGatherMode::kFusedLsa);
    auto bad = config_of(kQuants[1], GemmAllGatherMode::kAuto, 256, 256, 256);  // bf16 -> fp32
    bad.calibration = good;
    EXPECT_NE(test::error_of([&] { GemmAllGather::Impl::create(g, bad); }, Status::kInvalidArgument)
                  .find("is for another op shape: out bf16 (this op: fp32)"),
              std::string::npos);
    bad = cfg;
    bad.calibration = g.rank() == 0 ? good : other;
    EXPECT_NE(test::error_of([&] { GemmAllGather::Impl::create(g, bad); }, Status::kMismatch).find("calibration"),
              std::string::npos);
  });
  for (const auto& p : {good, other}) std::filesystem::remove(p);
}

// run(m, a, b, scales, out, stream): the output copied into the caller's buffer after the call, on
// its stream. W = 2; fused-lsa, split-lsa, fused-ce and auto; bf16 and fp32 out; M of one row, a
// partial tile and five tiles: out (a row-strided column slice of a wider buffer, NaN-poisoned
// first) is the window's view bitwise and the closed form per source, the columns beside it
// untouched; the same from graphs replayed with changing A. Bad outs are kInvalidArgument naming
// 'out' and the rule, before any GPU work; the ranks stay in step (the next call is right).
TEST(EmulatedGemmAllGather, CallerOutputIsTheWindowViewCopiedAfterTheCall) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 256, m_max = 640;
  const int world = 2;
  for (GemmAllGatherMode mode : {GemmAllGatherMode::kFusedLsa, GemmAllGatherMode::kSplitLsa,
                                 GemmAllGatherMode::kFusedCe, GemmAllGatherMode::kAuto})
    for (const QuantCase* q : {&kQuants[0], &kQuants[1]}) {  // bf16 -> bf16, bf16 -> fp32
      if (!fits_queues(mode, world)) {
        ADD_FAILURE() << mode_name(mode) << " not run at W2 in the emulated world";
        continue;
      }
      SCOPED_TRACE(mode_name(mode) + " " + q->name);
      bench::EmulatedWorld ew(world, 0, 20);
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        auto op = GemmAllGather::Impl::create(g, config_of(*q, mode, n, k, m_max));
        OneHot oh(m_max, n, k);
        Stream st;
        const double bound = 2 * g.timeout_s() + 5;
        auto check_out = [&](const test::CallerOut& out, uint64_t seed, int64_t m, const std::string& what) {
          test::expect_out_is_the_window_view(*op, m, out, what);
          const auto bad = oh.wrong_bytes(out.rows(), q->out, seed, world, m);
          for (int s = 0; s < world; ++s) EXPECT_EQ(bad[s], 0) << what << ": source " << s;
        };
        for (int64_t m : {1, 77, 640}) {
          const uint64_t seed = 40 + m;
          oh.set_a(seed, r, m);
          const test::CallerOut out(q->out, world * m, n, n + 3, dev);  // a row pitch of no particular alignment
          out.poison(st.s);
          g.barrier();
          op->run(m, oh.a_view(m, dev), oh.b_view(dev), {}, out.view, st.s);
          comm::sync_stream_bounded(st.s, bound, "a call with out");
          op->check();
          check_out(out, seed, m, "m " + std::to_string(m));
          g.barrier();  // nobody starts the next call while a peer still reads this one's output
        }
        // Graphs: [A variant -> the live A, the call with out], one per variant, replayed in turn
        // with out poisoned before each replay.
        const int64_t m = 300;
        const test::CallerOut out(q->out, world * m, n, n + 24, dev);
        test::expect_out_graph_replays(
            g, *op, m, k, m_max, oh.b_view(dev), out, [&](uint64_t seed) { return oh.host_a(seed, r, m); }, check_out,
            dev, st.s, bound);
        // Bad outs, then a good call: every rank is still in step.
        g.barrier();
        const int peer = 1 - r;
        const char* peer_out = GemmAllGather::Impl::of(*op).rt->window().handle().base[peer] +
                               GemmAllGather::Impl::of(*op).out_off;
        oh.set_a(41, r, m);
        test::expect_refused_outs_then_a_good_call(g, *op, m, oh.a_view(m, dev), oh.b_view(dev), out, peer_out, peer,
                                                   41, check_out, st.s, bound);
      });
    }
}

// Bad inputs: each a clear error naming the argument and the rule.
TEST(EmulatedGemmAllGather, BadInputsAreClearErrors) {
  WEAVE_REQUIRE_GPUS(1);
  auto cfg = config_of(kQuants[0], GemmAllGatherMode::kFusedLsa, 256, 256, 256);
  EXPECT_NE(GemmAllGather::validate(cfg, 9).find("world"), std::string::npos);
  auto c2 = cfg;
  c2.n = 100;
  EXPECT_NE(GemmAllGather::validate(c2, 2).find("multiple of 8"), std::string::npos);
  c2 = config_of(kQuants[2], GemmAllGatherMode::kFusedLsa, 256, 256, 256);
  c2.out_dtype = DType::kF32;
  EXPECT_NE(GemmAllGather::validate(c2, 2).find("bf16 output"), std::string::npos);
  c2 = cfg;
  c2.m_max = 0;
  EXPECT_NE(GemmAllGather::validate(c2, 2).find("m_max"), std::string::npos);
  bench::EmulatedWorld ew(2, 0, 5);
  // Ranks asking for different ops: kMismatch on every rank.
  ew.run([&](comm::Group& g) {
    auto c = cfg;
    if (g.rank() == 1) c.n = 512;
    const std::string msg = test::error_of([&] { GemmAllGather::Impl::create(g, c); }, Status::kMismatch);
    EXPECT_NE(msg.find("GemmAllGather configuration"), std::string::npos) << msg;
  });
  ew.run([&](comm::Group& g) {
    auto op = GemmAllGather::Impl::create(g, cfg);
    OneHot oh(256, 256, 256);
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
}
