// weave::Gemm mode mxfp8 on the GPU (ue8m0 1x32 / 32x32 scales, raw and packed layouts): every
// built mxfp8 instance x both layouts x both output dtypes on edge shapes (M = 1, 7, 64, 129,
// 1000; K = 32, 96, 128, 640, 7168; N not a multiple of the tile, partial last 32-row B scale
// block), the planner's grid and a grid of 3, 20 NaN-poisoned launches each against the fp64
// reference; raw == packed bitwise; integer inputs with power-of-two scales bitwise, including
// scale bytes at both ends of the ue8m0 range (0, 254) and misaligned raw rows (padded leading
// dimension); 0xFF (NaN) scales poisoning exactly the rows / 32-column blocks they scale; guard
// bytes after every scale tensor; refusals of malformed scale tensors.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "gemm/dispatch.hpp"
#include "support/gpu.hpp"
#include "test_gemm_support.hpp"

using namespace weave;
using namespace weave::test;

namespace {


const ScaleLayout kLayouts[] = {ScaleLayout::kRaw, ScaleLayout::kPacked};

// Downloads C (any dtype) as raw bytes, for bitwise comparisons between runs.
std::vector<uint8_t> download_bytes(const Guarded& c) {
  std::vector<uint8_t> h(c.bytes());
  EXPECT_EQ(cudaMemcpy(h.data(), c.get(), h.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// Whether the bf16 route must rerun this operand set on the native kernel (gemm/mx_dequant.hpp):
// a non-zero, non-NaN element under a scale byte outside [10, 246] other than 0xFF. Written from
// the rule, not from the kernel.
bool route_must_rerun(const OperandSet& o) {
  auto of = [](const ref::QuantMatrix& q, int64_t rows_per_scale) {
    for (int64_t r = 0; r < q.rows; ++r)
      for (int64_t c = 0; c < q.cols; ++c) {
        const uint8_t e = q.ue8m0[(r / rows_per_scale) * q.scale_cols + c / 32];
        const uint8_t mag = q.e4m3[r * q.cols + c] & 0x7F;
        if ((e < 10 || (e > 246 && e != 255)) && mag != 0 && mag != 0x7F) return true;
      }
    return false;
  };
  return of(o.qa, 1) || of(o.qb, 32);
}

// One configuration: kRepeats poisoned launches compared with the reference. Returns the output
// of the last launch (bytes) for cross-layout comparisons.
std::vector<uint8_t> check_config(const OperandSet& o, ScaleLayout layout, DType out, const GemmPlanOverrides& ov,
                                  const std::string& label, cudaStream_t stream) {
  GemmProblem p = o.p;
  p.out_dtype = out;
  p.scale_layout = layout;
  Guarded c(p.m * p.n * dtype_bytes(out));
  Gemm g(p, o.va, o.vb, o.scales_for(layout), TensorView::matrix(c.get(), out, p.m, p.n, 0), ov);
  const Guarded ws = attach_workspace(g);
  const RepeatResult r = run_repeated(g, o, c, out, kRepeats, stream);
  const std::string what = describe(o, out) + " " + std::string(to_string(layout)) + " " + g.plan().kernel +
                           " grid " + std::to_string(g.plan().grid) + " split_k " +
                           std::to_string(g.plan().split_k) + " (" + label + ")";
  EXPECT_FALSE(g.plan().gemv) << what;
  EXPECT_EQ(r.runs, kRepeats) << what;
  EXPECT_EQ(r.bad_runs, 0) << what << ": " << r.bad_runs << "/" << r.runs << " runs wrong, worst " << r.worst_wrong
                           << " elements (first at " << r.first_wrong << "), max_abs " << r.worst_max_abs << " rms "
                           << o.rms << " rel_l2 " << r.worst_rel_l2;
  EXPECT_EQ(r.never_written, 0) << what;
  if (!o.exact) EXPECT_LT(r.worst_rel_l2, rel_l2_bound(p.mode, out)) << what;
  EXPECT_TRUE(c.guard_intact()) << what << ": wrote past the end of C";
  if (ws.bytes() > 0) EXPECT_TRUE(ws.guard_intact()) << what << ": wrote past the end of the workspace";
  EXPECT_EQ(g.plan().mx_dequant, ov.mx_route == MxRoute::kBf16) << what;
  if (g.plan().mx_dequant) {
    // The route's flag word (offset 0 of the workspace, gemm.cpp) says whether the last call
    // reran on the native kernel; it must fire exactly where the exactness rule says.
    uint32_t flag = 0;
    EXPECT_EQ(cudaMemcpy(&flag, ws.get(), 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(flag, route_must_rerun(o) ? 1u : 0u) << what << ": the rerun flag";
  }
  std::printf("  %-50s %-7s %-44s grid %3d split %d  rel_l2 %.2e  max_abs/rms %.2e  bad %d/%d\n",
              describe(o, out).c_str(), std::string(to_string(layout)).c_str(), g.plan().kernel.c_str(),
              g.plan().grid, g.plan().split_k, r.worst_rel_l2, o.rms > 0 ? r.worst_max_abs / o.rms : 0.0,
              r.bad_runs, r.runs);
  return download_bytes(c);
}

// Every built mxfp8 tile x layout x out dtype, split 1 with the planner's grid and with grid 3,
// then the planner's own choice (split-K where it picks it); raw and packed outputs compared
// bitwise for each configuration.
void check_everything(const OperandSet& o, cudaStream_t stream) {
  int tried = 0;
  for (DType out : {DType::kBF16, DType::kF32}) {
    for (const auto& inst : gemm::gemm_instances()) {
      if (inst.mode != ScaleMode::kMxfp8 || inst.out_dtype != out || inst.scale_layout != ScaleLayout::kRaw) continue;
      std::vector<std::pair<std::string, GemmPlanOverrides>> configs = {
          {"split 1", GemmPlanOverrides{.block_m = inst.block_m, .block_n = inst.block_n, .split_k = 1}},
          {"split 1, grid 3",
           GemmPlanOverrides{.block_m = inst.block_m, .block_n = inst.block_n, .grid = 3, .split_k = 1}},
          {"planner split", GemmPlanOverrides{.block_m = inst.block_m, .block_n = inst.block_n}},
      };
      for (const auto& [label, ov] : configs) {
        std::vector<uint8_t> outputs[2];
        for (int l = 0; l < 2; ++l) outputs[l] = check_config(o, kLayouts[l], out, ov, label, stream);
        EXPECT_TRUE(outputs[0] == outputs[1])
            << describe(o, out) << " " << label << ": raw and packed scales gave different bits";
        ++tried;
      }
    }
    // The bf16 route (A and B converted to bf16, then the bf16 kernel; a guarded native rerun
    // where a scale is outside the exact range): the planner's tile, a grid of 3, and a K split.
    std::vector<std::pair<std::string, GemmPlanOverrides>> routes = {
        {"bf16 route", GemmPlanOverrides{.mx_route = MxRoute::kBf16}},
        {"bf16 route, grid 3", GemmPlanOverrides{.grid = 3, .mx_route = MxRoute::kBf16}},
    };
    if (o.p.k >= 128)
      routes.push_back({"bf16 route, split 2", GemmPlanOverrides{.split_k = 2, .mx_route = MxRoute::kBf16}});
    for (const auto& [label, ov] : routes) {
      std::vector<uint8_t> outputs[2];
      for (int l = 0; l < 2; ++l) outputs[l] = check_config(o, kLayouts[l], out, ov, label, stream);
      EXPECT_TRUE(outputs[0] == outputs[1])
          << describe(o, out) << " " << label << ": raw and packed scales gave different bits";
      ++tried;
    }
  }
  EXPECT_GT(tried, 0) << "no mxfp8 instance built";
  EXPECT_TRUE(inputs_intact(o)) << describe(o, DType::kF32) << ": an input or scale guard changed";
}

// Integer operands whose scale bytes are `base(row) + jitter` for one operand (base cycling
// through 0, 251 and 120: both ends of the ue8m0 range and the middle) and uniform in [105, 110]
// for the other. Every product 2^(ea + eb - 254) then lies in [2^-149, 2^117] and, K <= 256, every
// partial sum of an output fits 24 bits: the kernel's fp32 result is exact, so it is compared
// bitwise with the fp64 reference, subnormal scale products included.
OperandSet extreme_exact_operands(int64_t m, int64_t n, int64_t k, bool extremes_in_a, int64_t raw_ld_pad,
                                  uint64_t seed) {
  OperandSet o = make_operands(ScaleMode::kMxfp8, m, n, k, seed, /*exact=*/true);
  ref::Random rng(seed * 31 + 5);
  const int bases[3] = {0, 251, 120};
  auto fill = [&](ref::QuantMatrix& q, bool extreme) {
    for (int64_t r = 0; r < q.scale_rows; ++r)
      for (int64_t g = 0; g < q.scale_cols; ++g)
        q.ue8m0[r * q.scale_cols + g] =
            static_cast<uint8_t>(extreme ? bases[r % 3] + rng.integer(0, 3) : rng.integer(105, 110));
  };
  fill(o.qa, extremes_in_a);
  fill(o.qb, !extremes_in_a);
  finish_mx_operands(o, raw_ld_pad);
  compute_reference(o);
  return o;
}

}  // namespace

TEST(GemmMxfp8, EdgeShapesEveryLayoutAndDtype) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const Shape shapes[] = {
      {1, 256, 128, false},     // one row, one stage
      {7, 384, 640, false},     // N = 3 x 128, K = 20 groups
      {64, 136, 32, false},     // K = one group (below one 128-byte TMA slice); partial last B block
      {129, 264, 7168, false},  // long K; one row past a tile
      {1000, 392, 640, false},
      {1000, 520, 96, false},   // K = 3 groups: raw rows of 3 bytes (every row misaligned)
      {129, 264, 160, true},    // K tail: 5 groups, the last stage holds one
      {1000, 136, 224, true},
  };
  uint64_t seed = 4000;
  for (const Shape& s : shapes) check_everything(make_operands(ScaleMode::kMxfp8, s.m, s.n, s.k, seed++, s.exact), stream);
  cudaStreamDestroy(stream);
}

TEST(GemmMxfp8, ScaleExponentExtremesBitwise) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  // Extremes in A's rows, then in B's 32-row blocks; K = 32 (one group) and 256 (two stages);
  // raw rows padded by 3 bytes in one case (misaligned staging words).
  check_everything(extreme_exact_operands(130, 264, 256, true, 0, 51), stream);
  check_everything(extreme_exact_operands(77, 392, 32, true, 3, 52), stream);
  check_everything(extreme_exact_operands(200, 392, 256, false, 3, 53), stream);
  check_everything(extreme_exact_operands(1, 136, 96, false, 0, 54), stream);
  cudaStreamDestroy(stream);
}

// Negative control of the bf16 route's rerun: with it switched off (WEAVE_GEMM_DEBUG_SKIP_MX_RERUN),
// operands whose scale bytes leave the exact range must come out wrong (rounded or overflowed
// operands), so ScaleExponentExtremesBitwise would see a route that skipped its rerun.
TEST(GemmMxfp8, Bf16RouteWithoutItsRerunIsWrongOnExtremeScales) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const OperandSet o = extreme_exact_operands(130, 264, 256, true, 0, 51);
  ASSERT_TRUE(route_must_rerun(o));
  for (bool skip : {false, true}) {
    ASSERT_EQ(setenv("WEAVE_GEMM_DEBUG_SKIP_MX_RERUN", skip ? "1" : "0", 1), 0);
    GemmProblem p = o.p;
    p.out_dtype = DType::kF32;
    Guarded c(p.m * p.n * 4);
    Gemm g(p, o.va, o.vb, o.scales, TensorView::matrix(c.get(), DType::kF32, p.m, p.n, 0),
           GemmPlanOverrides{.mx_route = MxRoute::kBf16});
    const Guarded ws = attach_workspace(g);
    const RepeatResult r = run_repeated(g, o, c, DType::kF32, 3, stream);
    if (skip)
      EXPECT_EQ(r.bad_runs, r.runs) << "without the rerun, extreme scales must give wrong results";
    else
      EXPECT_EQ(r.bad_runs, 0) << "with the rerun, the result is the native kernel's (exact)";
    std::printf("  rerun %s: %d/%d runs wrong, worst %lld elements\n", skip ? "skipped" : "on", r.bad_runs, r.runs,
                static_cast<long long>(r.worst_wrong));
  }
  unsetenv("WEAVE_GEMM_DEBUG_SKIP_MX_RERUN");
  cudaStreamDestroy(stream);
}

// Random data with scale bytes drawn from [100, 154] (products 2^-54 .. 2^54) for both operands,
// against the fp64 reference on the same bytes.
TEST(GemmMxfp8, RandomScaleBytesAcrossTheRange) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (const Shape s : {Shape{300, 392, 640, false}, Shape{129, 264, 4096, false}}) {
    OperandSet o = make_operands(ScaleMode::kMxfp8, s.m, s.n, s.k, 77 + s.k, false);
    ref::Random rng(s.k);
    for (auto& e : o.qa.ue8m0) e = static_cast<uint8_t>(rng.integer(100, 154));
    for (auto& e : o.qb.ue8m0) e = static_cast<uint8_t>(rng.integer(100, 154));
    finish_mx_operands(o);
    compute_reference(o);
    check_everything(o, stream);
  }
  cudaStreamDestroy(stream);
}

// 0xFF (NaN) scale bytes: A's byte (r, g) makes row r of C NaN, B's byte (nb, g) makes columns
// [32 nb, 32 nb + 32) NaN, and nothing else changes (integer data: everything else bitwise).
TEST(GemmMxfp8, NanScalePropagatesToExactlyTheScaledRowsAndColumns) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const int64_t m = 300, n = 392, k = 640, groups = k / 32;
  OperandSet o = make_operands(ScaleMode::kMxfp8, m, n, k, 91, true);
  const std::set<int64_t> nan_rows = {0, 129, 299};
  const std::set<int64_t> nan_blocks = {3, 12};  // block 12 = columns 384..391 (partial)
  o.qa.ue8m0[0 * groups + 0] = 0xFF;
  o.qa.ue8m0[129 * groups + 19] = 0xFF;  // last group (last stage)
  o.qa.ue8m0[299 * groups + 7] = 0xFF;
  o.qb.ue8m0[3 * groups + 5] = 0xFF;
  o.qb.ue8m0[12 * groups + 11] = 0xFF;
  finish_mx_operands(o);
  compute_reference(o);
  int64_t expected_nan = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const bool nan = nan_rows.count(r) || nan_blocks.count(c / 32);
      ASSERT_EQ(std::isnan(o.ref[r * n + c]), nan) << "reference at " << r << ", " << c;
      expected_nan += nan;
    }
  std::printf("  NaN scales: %lld of %lld outputs expected NaN\n", static_cast<long long>(expected_nan),
              static_cast<long long>(m * n));
  // check_everything compares each launch with the reference: a NaN where the reference is finite,
  // or a finite value where it is NaN, counts as wrong.
  check_everything(o, stream);
  cudaStreamDestroy(stream);
}

TEST(GemmMxfp8, MalformedScalesAreRefusedNamingTheArgument) {
  WEAVE_REQUIRE_GPUS(1);
  const OperandSet o = make_operands(ScaleMode::kMxfp8, 256, 256, 512, 33, false);
  Guarded c(256 * 256 * 4);
  const TensorView cv = TensorView::matrix(c.get(), DType::kF32, 256, 256, 0);
  auto expect_refusal = [&](const char* needle, auto&& make) {
    try {
      make();
      ADD_FAILURE() << "expected a refusal mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  GemmProblem raw = o.p, packed = o.p;
  raw.out_dtype = packed.out_dtype = DType::kF32;
  packed.scale_layout = ScaleLayout::kPacked;
  // Packed tensors declared raw, and raw declared packed: shapes do not match the declared layout.
  expect_refusal("'scale_a'", [&] { Gemm g(raw, o.va, o.vb, o.scales_packed, cv); });
  expect_refusal("'scale_a'", [&] { Gemm g(packed, o.va, o.vb, o.scales, cv); });
  // fp32 scales (blockscale-style) for mxfp8.
  expect_refusal("'scale_a'", [&] {
    Gemm g(raw, o.va, o.vb,
           GemmScales{TensorView::matrix(o.sa.get(), DType::kF32, 256, 16, 0), o.scales.b}, cv);
  });
  // A raw scale tensor one byte off a 4-byte boundary.
  expect_refusal("4-byte aligned", [&] {
    TensorView t = o.scales.a;
    t.data = static_cast<char*>(t.data) + 1;
    t.shape[0] = 255;  // stay inside the allocation
    GemmProblem p = raw;
    p.m = 255;
    Gemm g(p, TensorView::matrix(o.a.get(), DType::kE4M3, 255, 512, 0), o.vb, GemmScales{t, o.scales.b},
           TensorView::matrix(c.get(), DType::kF32, 255, 256, 0));
  });
  // K not a multiple of 32.
  GemmProblem bad = raw;
  bad.k = 48;
  expect_refusal("multiple of 32", [&] { Gemm g(bad, o.va, o.vb, o.scales, cv); });
}
