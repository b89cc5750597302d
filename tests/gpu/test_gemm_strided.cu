// weave::Gemm on strided operands: lda > K, ldb > K, ldc > N and scale tensors whose leading
// dimension is larger than their column count (blockscale fp32 [rows, K/128 + pad], mxfp8 raw
// ue8m0 [rows, K/32 + pad], mxfp8 packed [ceil(K/128), 4 x rows + pad]), on every route C can be
// written by: the tiled kernel's TMA-store epilogue (split_k = 1), the split-K reduction (forced
// split 3, which stores row * ldc), the decode GEMV (M <= 32) and mxfp8's bf16 route (its
// conversion reads the padded operands and scales). Every other test of weave::Gemm
// uses dense tensors, where ld == cols hides any place that uses one for the other.
//
// What each check catches:
//  - padding of A, B and of the scale rows holds NaN (bf16 0x7FC0, e4m3 0x7F, fp32 NaN, ue8m0
//    0xFF): a kernel or descriptor that takes the row length for the leading dimension (or reads
//    past K into the padding) turns outputs NaN or moves them by O(rms) -> wrong elements;
//  - C's padding columns (between rows and after the last row) hold a finite sentinel that must
//    survive every launch: an epilogue map or reduction that stores with ld = N, or writes a
//    full tile width past N, overwrites it; the valid part is NaN-poisoned before each launch, so
//    an element stored at the wrong row offset leaves a NaN ("never written") behind;
//  - the split-K workspace is NaN-poisoned before every launch too (a partial plane the GEMM did
//    not rewrite in this launch shows up as NaN instead of as last launch's equal values);
//  - guard bytes after every tensor (C included) stay intact.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "gemm/planner.hpp"
#include "support/gpu.hpp"
#include "test_gemm_support.hpp"

using namespace weave;
using namespace weave::test;

namespace {

constexpr int kStridedRepeats = 5;
const std::vector<uint8_t> kNanBf16Bytes = {0xC0, 0x7F};
const std::vector<uint8_t> kNanE4m3Bytes = {0x7F};
const std::vector<uint8_t> kNanF32Bytes = {0x00, 0x00, 0xC0, 0x7F};
const std::vector<uint8_t> kNanUe8m0Bytes = {0xFF};
// C's padding sentinel: finite in fp32 (0xDEADBEEF) and in bf16 (0xBEEF, 0xDEAD), never a NaN
// poison pattern and never a plausible result.
const std::vector<uint8_t> kSentinel = {0xEF, 0xBE, 0xAD, 0xDE};

// [rows, ld] bytes of a dense row-major [rows, cols] array of `eb`-byte elements; padding elements
// hold `pad` (one element's bytes, repeated).
std::vector<uint8_t> pad_rows(const void* dense, int64_t rows, int64_t cols, int64_t ld, std::size_t eb,
                              const std::vector<uint8_t>& pad) {
  std::vector<uint8_t> out(static_cast<std::size_t>(rows * ld) * eb);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = pad[i % pad.size()];
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + r * ld * eb, static_cast<const uint8_t*>(dense) + r * cols * eb, cols * eb);
  return out;
}

Guarded upload_bytes(const std::vector<uint8_t>& bytes) {
  Guarded g(bytes.size());
  g.upload(bytes.data());
  return g;
}

struct Pads {
  int64_t a = 0, b = 0;              // elements added to lda / ldb (multiples of 16 bytes)
  int64_t scale_a = 0, scale_b = 0;  // elements added to the scale tensors' ld (0 on the GEMV route)
};

// Padded device copies of an OperandSet's A, B and scales (the reference stays o.ref).
struct Strided {
  Guarded a, b, sa, sb;
  TensorView va, vb;
  GemmScales scales;
  int64_t lda = 0, ldb = 0;
};

Strided make_strided(const OperandSet& o, ScaleLayout layout, const Pads& pads) {
  Strided s;
  const GemmProblem& p = o.p;
  const bool bf16 = p.mode == ScaleMode::kBF16;
  const std::size_t eb = bf16 ? 2 : 1;
  const DType in = bf16 ? DType::kBF16 : DType::kE4M3;
  const std::vector<uint8_t>& nan = bf16 ? kNanBf16Bytes : kNanE4m3Bytes;
  const void* ha = bf16 ? static_cast<const void*>(o.qa.bf16.data()) : o.qa.e4m3.data();
  const void* hb = bf16 ? static_cast<const void*>(o.qb.bf16.data()) : o.qb.e4m3.data();
  s.lda = p.k + pads.a;
  s.ldb = p.k + pads.b;
  s.a = upload_bytes(pad_rows(ha, p.m, p.k, s.lda, eb, nan));
  s.b = upload_bytes(pad_rows(hb, p.n, p.k, s.ldb, eb, nan));
  s.va = TensorView::matrix(s.a.get(), in, p.m, p.k, s.lda, 0);
  s.vb = TensorView::matrix(s.b.get(), in, p.n, p.k, s.ldb, 0);
  auto padded_scales = [&](const ref::QuantMatrix& q, int64_t pad, Guarded& g, TensorView& view) {
    if (p.mode == ScaleMode::kBlockscale && layout == ScaleLayout::kMnMajor && &q == &o.qa) {
      // M-contiguous: K block kb's column at kb * ld, ld = M rounded to 4 plus 4 * pad floats of
      // NaN (the TMA row pitch stays a multiple of 16 bytes).
      const int64_t ld = ref::mn_major_scale_ld(q.scale_rows) + 4 * pad;
      const std::vector<float> mn = ref::mn_major_block_scales(q.scales.data(), q.scale_rows, q.scale_cols);
      const int64_t dense_ld = ref::mn_major_scale_ld(q.scale_rows);
      g = upload_bytes(pad_rows(mn.data(), q.scale_cols, dense_ld, ld, 4, kNanF32Bytes));
      view = TensorView{.data = g.get(), .dtype = DType::kF32, .rank = 2, .shape = {q.scale_rows, q.scale_cols},
                        .strides = {1, ld}, .device = 0};
    } else if (p.mode == ScaleMode::kBlockscale) {
      const int64_t ld = q.scale_cols + pad;
      g = upload_bytes(pad_rows(q.scales.data(), q.scale_rows, q.scale_cols, ld, 4, kNanF32Bytes));
      view = TensorView::matrix(g.get(), DType::kF32, q.scale_rows, q.scale_cols, ld, 0);
    } else if (layout == ScaleLayout::kRaw) {
      const int64_t ld = q.scale_cols + pad;
      g = upload_bytes(pad_rows(q.ue8m0.data(), q.scale_rows, q.scale_cols, ld, 1, kNanUe8m0Bytes));
      view = TensorView::matrix(g.get(), DType::kUE8M0, q.scale_rows, q.scale_cols, ld, 0);
    } else {
      const int64_t k_words = (p.k + 127) / 128, cols = 4 * q.scale_rows, ld = cols + 4 * pad;
      const std::vector<uint32_t> words = ref::pack_mxfp8_scales(q.ue8m0.data(), q.scale_rows, p.k / 32);
      g = upload_bytes(pad_rows(words.data(), k_words, cols, ld, 1, kNanUe8m0Bytes));
      view = TensorView::matrix(g.get(), DType::kUE8M0, k_words, cols, ld, 0);
    }
  };
  if (p.mode == ScaleMode::kPtpc || pads.scale_a + pads.scale_b == 0) {
    s.scales = o.scales_for(layout);  // vectors (ptpc) or dense (the GEMV route): the set's own
  } else if (p.mode != ScaleMode::kBF16) {
    padded_scales(o.qa, pads.scale_a, s.sa, s.scales.a);
    padded_scales(o.qb, pads.scale_b, s.sb, s.scales.b);
  }
  return s;
}

bool strided_intact(const Strided& s) {
  return s.a.guard_intact() && s.b.guard_intact() && (s.sa.get() == nullptr || s.sa.guard_intact()) &&
         (s.sb.get() == nullptr || s.sb.guard_intact());
}

struct Route {
  const char* name;
  int split;                // GemmPlanOverrides::split_k; 0 on the GEMV route
  bool mx_bf16 = false;     // mxfp8 through the bf16 route (gemm/mx_dequant.hpp), the planner's tile
};

// Runs `o` (strided per `pads`) into C [M, N] with ld = N + ldc_pad, kStridedRepeats times:
// C's valid part NaN, its padding the sentinel, the workspace NaN before each launch.
void check_strided(const OperandSet& o, ScaleLayout layout, DType out, const Pads& pads, int64_t ldc_pad,
                   const Route& route, cudaStream_t stream) {
  GemmProblem p = o.p;
  p.out_dtype = out;
  p.scale_layout = layout;
  const Strided s = make_strided(o, layout, pads);
  const std::size_t ob = dtype_bytes(out);
  const int64_t ldc = p.n + ldc_pad;
  Guarded c(static_cast<std::size_t>(p.m * ldc) * ob);
  GemmPlanOverrides ov;
  if (route.mx_bf16) {
    ov.mx_route = MxRoute::kBf16;
    ov.split_k = route.split;
  } else if (route.split > 0) {
    ov.split_k = route.split;
    ov.block_m = ov.block_n = 128;
  } else {
    ov.decode_route = DecodeRoute::kGemv;  // small shapes: the measured rule would take the tiles in bf16
  }
  Gemm g(p, s.va, s.vb, s.scales, TensorView::matrix(c.get(), out, p.m, p.n, ldc, 0), ov);
  const std::string what = describe(o, out) + " " + std::string(to_string(layout)) + " " + route.name + " " +
                           g.plan().kernel + " lda " + std::to_string(s.lda) + " ldb " + std::to_string(s.ldb) +
                           " ldc " + std::to_string(ldc);
  SCOPED_TRACE(what);
  // The route under test must be the one taken (a silent fallback would test something else).
  ASSERT_EQ(g.plan().gemv, route.split == 0);
  ASSERT_EQ(g.plan().mx_dequant, route.mx_bf16);
  if (route.split > 1) ASSERT_EQ(g.plan().split_k, route.split);
  const Guarded ws = attach_workspace(g);

  std::vector<uint8_t> image(c.bytes());
  const std::vector<uint8_t>& nan = out == DType::kF32 ? kNanF32Bytes : kNanBf16Bytes;
  for (int64_t r = 0; r < p.m; ++r)
    for (int64_t col = 0; col < ldc; ++col)
      for (std::size_t b = 0; b < ob; ++b)
        image[(r * ldc + col) * ob + b] = col < p.n ? nan[b] : kSentinel[(col * ob + b) % kSentinel.size()];
  const bench::Tolerance t = tolerance_for(p.mode, out);
  const double atol = t.atol + t.atol_rms * o.rms;
  std::vector<uint8_t> got(c.bytes());
  std::vector<float> v32(static_cast<std::size_t>(p.m * p.n));
  std::vector<uint16_t> v16(static_cast<std::size_t>(p.m * p.n));
  for (int rep = 0; rep < kStridedRepeats; ++rep) {
    c.upload(image.data());
    if (ws.bytes() > 0) bench::poison_nan(ws.get(), ws.bytes(), DType::kF32, stream);
    g.run(stream);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), c.get(), got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    int64_t pad_changed = 0, first_pad = -1;
    for (int64_t r = 0; r < p.m; ++r)
      for (int64_t col = 0; col < ldc; ++col) {
        const uint8_t* e = got.data() + (r * ldc + col) * ob;
        if (col >= p.n) {
          if (std::memcmp(e, image.data() + (r * ldc + col) * ob, ob) != 0) {
            if (first_pad < 0) first_pad = r * ldc + col;
            ++pad_changed;
          }
        } else if (ob == 4) {
          std::memcpy(&v32[r * p.n + col], e, 4);
        } else {
          std::memcpy(&v16[r * p.n + col], e, 2);
        }
      }
    EXPECT_EQ(pad_changed, 0) << "launch " << rep << " overwrote C's padding columns (first at row "
                              << first_pad / ldc << " col " << first_pad % ldc << ")";
    const int64_t count = p.m * p.n;
    const ref::Comparison cmp = out == DType::kF32 ? ref::compare(v32.data(), o.ref.data(), count, t.rtol, atol)
                                                   : ref::compare_bf16(v16.data(), o.ref.data(), count, t.rtol, atol);
    EXPECT_EQ(cmp.wrong, 0) << "launch " << rep << ": first wrong at row "
                            << (cmp.first_wrong >= 0 ? cmp.first_wrong / p.n : -1) << " col "
                            << (cmp.first_wrong >= 0 ? cmp.first_wrong % p.n : -1) << " (never written "
                            << cmp.never_written << ", nonfinite " << cmp.nonfinite << ", rel_l2 " << cmp.rel_l2 << ")";
    EXPECT_LT(cmp.rel_l2, rel_l2_bound(p.mode, out)) << "launch " << rep;
    if (rep == 0)
      std::printf("  %-44s %-6s %-7s %-46s lda %5lld ldb %5lld ldc %4lld  rel_l2 %.2e  wrong %lld  pad changed %lld\n",
                  describe(o, out).c_str(), std::string(to_string(layout)).c_str(), route.name,
                  g.plan().kernel.c_str(), static_cast<long long>(s.lda), static_cast<long long>(s.ldb),
                  static_cast<long long>(ldc), cmp.rel_l2, static_cast<long long>(cmp.wrong),
                  static_cast<long long>(pad_changed));
    if (cmp.wrong || pad_changed) break;
  }
  EXPECT_TRUE(c.guard_intact()) << "wrote past the end of C";
  EXPECT_TRUE(strided_intact(s)) << "an input or scale guard changed";
  if (ws.bytes() > 0) EXPECT_TRUE(ws.guard_intact()) << "wrote past the workspace";
}

// Element pads of A and B: 3 and 5 x 16 bytes (so lda != ldb, and neither is a power of two).
Pads pads_for(ScaleMode mode, bool scales) {
  const int64_t per16 = mode == ScaleMode::kBF16 ? 8 : 16;
  Pads pads{.a = 3 * per16, .b = 5 * per16};
  if (scales) pads.scale_a = 3, pads.scale_b = 5;  // mxfp8 packed: words (x4 bytes)
  return pads;
}

}  // namespace

// Tiled kernel, no split (TMA-store epilogue over C with ld = N + 24) and forced split 3 (the
// reduction's row * ldc store), every mode, both output dtypes, padded A, B and scales.
TEST(GemmStrided, TiledAndSplitKWithPaddedOperandsScalesAndC) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  int tried = 0;
  for (const Mode md : kModes) {
    // 200 rows (a partial 128-row tile), N = 264 (a partial tile; N % 4 == 0 for the reduction),
    // K = 1024 (8 fp8 / 16 bf16 K blocks: split 3 is uneven).
    const int64_t m = 200, n = 264, k = 1024;
    GemmProblem probe{.m = m, .n = n, .k = k, .mode = md.mode, .scale_layout = md.layout};
    if (!split_k_tiles_built(probe)) continue;
    const OperandSet o = make_operands(md.mode, m, n, k, 3100 + 10 * static_cast<int>(md.mode) +
                                                             static_cast<int>(md.layout), false);
    for (DType out : {DType::kBF16, DType::kF32})
      for (const Route route : {Route{"tiled", 1}, Route{"split3", 3}}) {
        check_strided(o, md.layout, out, pads_for(md.mode, true), 24, route, stream);
        ++tried;
        if (HasFatalFailure()) return;
      }
  }
  EXPECT_GT(tried, 0) << "no instance built";
  cudaStreamDestroy(stream);
}

// The decode GEMV route of weave::Gemm (M = 7): padded A, B and C (its scales must be dense:
// GemmGemvRoute.RefusesNonDenseScales).
TEST(GemmStrided, GemvRouteWithPaddedOperandsAndC) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (const Mode md : kModes) {
    if (md.layout == ScaleLayout::kPacked) continue;  // the GEMV reads raw scales only
    const OperandSet o = make_operands(md.mode, 7, 264, 1024, 3300 + static_cast<int>(md.mode), false);
    for (DType out : {DType::kBF16, DType::kF32}) {
      check_strided(o, md.layout, out, pads_for(md.mode, false), 24, Route{"gemv", 0}, stream);
      if (HasFatalFailure()) return;
    }
  }
  cudaStreamDestroy(stream);
}

// mxfp8 through the bf16 route (A and B converted to bf16 into the workspace, then the bf16
// kernel): the conversion reads A, B and both scale layouts with their padded leading dimensions,
// and C is stored with ld = N + 24; no split and a forced split of 3.
TEST(GemmStrided, Mxfp8Bf16RouteWithPaddedOperandsScalesAndC) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const OperandSet o = make_operands(ScaleMode::kMxfp8, 200, 264, 1024, 3400, false);
  for (ScaleLayout layout : {ScaleLayout::kRaw, ScaleLayout::kPacked})
    for (DType out : {DType::kBF16, DType::kF32})
      for (const Route route : {Route{"bf16rt", 1, true}, Route{"bf16rt-s3", 3, true}}) {
        check_strided(o, layout, out, pads_for(ScaleMode::kMxfp8, true), 24, route, stream);
        if (HasFatalFailure()) return;
      }
  cudaStreamDestroy(stream);
}
