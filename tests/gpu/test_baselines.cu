// The benchmark's baselines and checkers, each against something independent of it:
//  - cuBLASLt (bf16, ptpc, blockscale) and the GPU reference GEMM against the CPU fp64 reference
//    on small random shapes (M = 1, 7, 100, 129, 260; N not a multiple of 128; K = 256..1024),
//    outputs NaN-poisoned before every run, within the bounds of bench::gemm_tolerance;
//  - the GPU reference bitwise against fp64 where the sums are exact (small integers);
//  - the device compare kernel counting planted errors exactly, as ref::compare does on the host;
//  - negative controls: a wrong block scale, and cuBLASLt fed our (untransposed) activation-scale
//    layout, are both seen as wrong, so the checks and the layout conversion have teeth.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "bench/cublaslt.hpp"
#include "support/gpu.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "weave/error.hpp"
#include "weave/quant.hpp"
#include "weave/reference.hpp"

using namespace weave;
using bench::DeviceBuffer;
using bench::DeviceOperand;

namespace {

struct Shape {
  int64_t m, n, k;
};
// M: 1, a prime, not a multiple of 16, one past a tile, a multiple of 4 but not 16.
// N: not a multiple of 128 in two cases (a partial last 128-row weight block).
const Shape kShapes[] = {{1, 256, 384}, {7, 128, 256}, {100, 384, 640}, {129, 272, 1024},
                         {260, 200, 512}};

struct Problem {
  GemmProblem p;
  ref::QuantMatrix qa, qb;
  DeviceOperand a, b;
  std::vector<double> ref;  // fp64 [M, N]
  double rms = 0;

  GemmScales scales() const { return {a.scale_view, b.scale_view}; }
};

Problem make_problem(ScaleMode mode, Shape s, uint64_t seed) {
  Problem pr;
  pr.p = GemmProblem{.m = s.m, .n = s.n, .k = s.k, .mode = mode};
  const auto xa = bench::random_operand(seed, s.m, s.k);
  const auto xb = bench::random_operand(seed + 1000, s.n, s.k);
  pr.qa = ref::quantize(xa.data(), s.m, s.k, mode, ref::Operand::kA);
  pr.qb = ref::quantize(xb.data(), s.n, s.k, mode, ref::Operand::kB);
  pr.a = bench::upload_operand(pr.qa, 0);
  pr.b = bench::upload_operand(pr.qb, 0);
  pr.ref = ref::gemm_f64(pr.qa, pr.qb);
  double sq = 0;
  for (double v : pr.ref) sq += v * v;
  pr.rms = std::sqrt(sq / pr.ref.size());
  return pr;
}

// Host comparison with a bench::Tolerance (atol_rms resolved with the fp64 reference's rms).
ref::Comparison host_compare(const TensorView& out, const Problem& pr, const bench::Tolerance& t) {
  const std::vector<float> h = bench::download_as_f32(out);
  if (out.dtype == DType::kBF16) {
    // Re-narrow to the raw bits so compare_bf16 also sees the poison pattern.
    std::vector<uint16_t> bits(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &h[i], 4);
      bits[i] = static_cast<uint16_t>(u >> 16);
    }
    return ref::compare_bf16(bits.data(), pr.ref.data(), h.size(), t.rtol, t.atol + t.atol_rms * pr.rms);
  }
  return ref::compare(h.data(), pr.ref.data(), h.size(), t.rtol, t.atol + t.atol_rms * pr.rms);
}

std::string what(const Problem& pr, DType out) {
  return std::string(to_string(pr.p.mode)) + " " + std::to_string(pr.p.m) + "x" +
         std::to_string(pr.p.n) + "x" + std::to_string(pr.p.k) + " ->" + std::string(to_string(out));
}

// cuBLASLt in `mode` on every shape and output dtype, three poisoned runs each, against fp64.
void check_cublaslt_mode(ScaleMode mode) {
  uint64_t seed = 100 + 10 * static_cast<int>(mode);
  for (const Shape& s : kShapes) {
    Problem pr = make_problem(mode, s, seed++);
    for (DType out : {DType::kBF16, DType::kF32}) {
      pr.p.out_dtype = out;
      const std::string why = bench::CublasLtGemm::supports(pr.p);
      if (mode == ScaleMode::kBlockscale && (s.m % 4 != 0)) {
        // cuBLASLt's block scaling needs M % 4 == 0: refused with the rule, not run wrongly.
        EXPECT_NE(why.find("multiples of 4"), std::string::npos) << what(pr, out) << ": " << why;
        try {
          bench::CublasLtGemm refused(pr.p, 0);
          ADD_FAILURE() << what(pr, out) << ": constructor accepted an unsupported shape";
        } catch (const Error& e) {
          EXPECT_EQ(e.status(), Status::kUnsupported) << e.what();
        }
        continue;
      }
      ASSERT_EQ(why, "") << what(pr, out);
      bench::CublasLtGemm lt(pr.p, 0);
      const bench::CublasLtScales scales = lt.prepare_scales(pr.scales(), nullptr);
      DeviceBuffer c(s.m * s.n * dtype_bytes(out));
      const TensorView cv = TensorView::matrix(c.get(), out, s.m, s.n, 0);
      const bench::Tolerance tol = bench::gemm_tolerance(mode, out);
      for (int rep = 0; rep < 3; ++rep) {
        bench::poison_nan(c.get(), c.bytes(), out, nullptr);
        lt.run(pr.a.view, pr.b.view, scales, cv, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const ref::Comparison cmp = host_compare(cv, pr, tol);
        EXPECT_EQ(cmp.wrong, 0) << what(pr, out) << " rep " << rep << ": first wrong at "
                                << cmp.first_wrong << ", max_abs " << cmp.max_abs << ", rel_l2 "
                                << cmp.rel_l2 << ", rms " << pr.rms << " (" << lt.describe() << ")";
        EXPECT_EQ(cmp.never_written, 0) << what(pr, out);
        // The whole-output error is far inside the per-element bound.
        EXPECT_LT(cmp.rel_l2, out == DType::kBF16 ? 4e-3 : (mode == ScaleMode::kBF16 ? 1e-5 : 5e-4))
            << what(pr, out);
      }
    }
  }
}

}  // namespace

TEST(CublasLtBaseline, Bf16MatchesFp64Reference) {
  WEAVE_REQUIRE_GPUS(1);
  check_cublaslt_mode(ScaleMode::kBF16);
}

TEST(CublasLtBaseline, PtpcMatchesFp64Reference) {
  WEAVE_REQUIRE_GPUS(1);
  check_cublaslt_mode(ScaleMode::kPtpc);
}

TEST(CublasLtBaseline, BlockscaleMatchesFp64Reference) {
  WEAVE_REQUIRE_GPUS(1);
  check_cublaslt_mode(ScaleMode::kBlockscale);
}

TEST(CublasLtBaseline, RefusesMxfp8WithTheReason) {
  GemmProblem p{.m = 128, .n = 128, .k = 128, .mode = ScaleMode::kMxfp8};
  EXPECT_NE(bench::CublasLtGemm::supports(p).find("Blackwell"), std::string::npos);
}

// Negative control for the layout conversion: the activation scales handed over in our own
// [M, K/128] order (not transposed) give a wrong result, which the comparison sees.
TEST(CublasLtBaseline, UntransposedActivationScalesAreCaught) {
  WEAVE_REQUIRE_GPUS(1);
  Problem pr = make_problem(ScaleMode::kBlockscale, {260, 200, 512}, 7);
  pr.p.out_dtype = DType::kF32;
  bench::CublasLtGemm lt(pr.p, 0);
  bench::CublasLtScales scales = lt.prepare_scales(pr.scales(), nullptr);
  scales.lt_b = static_cast<const float*>(pr.a.scale_view.data);  // the wrong layout
  DeviceBuffer c(pr.p.m * pr.p.n * 4);
  const TensorView cv = TensorView::matrix(c.get(), DType::kF32, pr.p.m, pr.p.n, 0);
  bench::poison_nan(c.get(), c.bytes(), DType::kF32, nullptr);
  lt.run(pr.a.view, pr.b.view, scales, cv, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const ref::Comparison cmp = host_compare(cv, pr, bench::gemm_tolerance(ScaleMode::kBlockscale, DType::kF32));
  EXPECT_GT(cmp.wrong, pr.p.m * pr.p.n / 2) << "the scale layout is not what the header claims";
}

// The GPU reference, every mode (mxfp8 raw and packed), against fp64 with a tight bound: the only
// differences are the fp32 rounding of each dequantised operand and of the final sum.
TEST(GpuReference, MatchesFp64ReferenceEveryMode) {
  WEAVE_REQUIRE_GPUS(1);
  uint64_t seed = 500;
  for (ScaleMode mode : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8}) {
    for (const Shape& s : kShapes) {
      Problem pr = make_problem(mode, s, seed++);
      DeviceBuffer c(s.m * s.n * 4);
      const TensorView cv = TensorView::matrix(c.get(), DType::kF32, s.m, s.n, 0);
      const bench::Tolerance tight{.rtol = 1e-5, .atol = 0, .atol_rms = 1e-5};
      for (ScaleLayout layout : {ScaleLayout::kRaw, ScaleLayout::kPacked}) {
        if (layout == ScaleLayout::kPacked && mode != ScaleMode::kMxfp8) continue;
        GemmScales scales = pr.scales();
        DeviceBuffer packed_a, packed_b;
        if (layout == ScaleLayout::kPacked) {
          // Packed words [ceil(K/128), rows] viewed as ue8m0 bytes [ceil(K/128), 4 * rows].
          auto pack = [&](const ref::QuantMatrix& q, DeviceBuffer& buf) {
            const auto words = ref::pack_mxfp8_scales(q.ue8m0.data(), q.scale_rows, q.scale_cols);
            buf = DeviceBuffer(words.size() * 4);
            buf.upload(words.data(), buf.bytes());
            return TensorView::matrix(buf.get(), DType::kUE8M0, (s.k + 127) / 128, 4 * q.scale_rows, 0);
          };
          scales.a = pack(pr.qa, packed_a);
          scales.b = pack(pr.qb, packed_b);
        }
        pr.p.scale_layout = layout;
        bench::poison_nan(c.get(), c.bytes(), DType::kF32, nullptr);
        bench::gpu_reference_gemm(pr.p, pr.a.view, pr.b.view, scales, c.as<float>(), nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const ref::Comparison cmp = host_compare(cv, pr, tight);
        EXPECT_EQ(cmp.wrong, 0) << what(pr, DType::kF32) << " " << to_string(layout)
                                << ": first wrong " << cmp.first_wrong << " max_abs "
                                << cmp.max_abs << " rms " << pr.rms;
        EXPECT_LT(cmp.rel_l2, 2e-6) << what(pr, DType::kF32);
      }
    }
  }
}

// Small integers (exact in bf16 and e4m3) with power-of-two scales: every product and partial sum
// is exact in fp32, so the GPU reference must equal fp64 bit for bit.
TEST(GpuReference, BitwiseExactOnIntegerInputs) {
  WEAVE_REQUIRE_GPUS(1);
  ref::Random rng(77);
  const int64_t m = 67, n = 96, k = 512;
  for (ScaleMode mode : {ScaleMode::kBF16, ScaleMode::kMxfp8}) {
    std::vector<float> xa = ref::random_integers(rng, m * k, 8);
    std::vector<float> xb = ref::random_integers(rng, n * k, 8);
    Problem pr;
    pr.p = GemmProblem{.m = m, .n = n, .k = k, .mode = mode, .out_dtype = DType::kF32};
    pr.qa = ref::quantize(xa.data(), m, k, mode, ref::Operand::kA);
    pr.qb = ref::quantize(xb.data(), n, k, mode, ref::Operand::kB);
    pr.a = bench::upload_operand(pr.qa, 0);
    pr.b = bench::upload_operand(pr.qb, 0);
    pr.ref = ref::gemm_f64(pr.qa, pr.qb);
    DeviceBuffer c(m * n * 4);
    bench::poison_nan(c.get(), c.bytes(), DType::kF32, nullptr);
    bench::gpu_reference_gemm(pr.p, pr.a.view, pr.b.view, pr.scales(), c.as<float>(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto h = bench::download_as_f32(TensorView::matrix(c.get(), DType::kF32, m, n, 0));
    int64_t differ = 0;
    for (int64_t i = 0; i < m * n; ++i) differ += static_cast<double>(h[i]) != pr.ref[i];
    EXPECT_EQ(differ, 0) << to_string(mode);
  }
}

// A NaN ue8m0 scale (0xFF) in one A row makes exactly that output row NaN, in the GPU reference
// as in fp64, and the comparison counts NaN-for-NaN as agreement.
TEST(GpuReference, PropagatesNanMxScale) {
  WEAVE_REQUIRE_GPUS(1);
  Problem pr = make_problem(ScaleMode::kMxfp8, {36, 128, 256}, 9);
  pr.p.out_dtype = DType::kF32;
  const int64_t bad_row = 5;
  pr.qa.ue8m0[bad_row * pr.qa.scale_cols + 3] = 0xFF;
  pr.a = bench::upload_operand(pr.qa, 0);
  pr.ref = ref::gemm_f64(pr.qa, pr.qb);
  DeviceBuffer c(pr.p.m * pr.p.n * 4);
  bench::gpu_reference_gemm(pr.p, pr.a.view, pr.b.view, pr.scales(), c.as<float>(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto h = bench::download_as_f32(TensorView::matrix(c.get(), DType::kF32, pr.p.m, pr.p.n, 0));
  int64_t nan_total = 0, nan_in_row = 0;
  for (int64_t i = 0; i < pr.p.m * pr.p.n; ++i) {
    nan_total += std::isnan(h[i]);
    nan_in_row += std::isnan(h[i]) && i / pr.p.n == bad_row;
  }
  EXPECT_EQ(nan_in_row, pr.p.n);
  EXPECT_EQ(nan_total, pr.p.n);
  const ref::Comparison cmp = host_compare(TensorView::matrix(c.get(), DType::kF32, pr.p.m, pr.p.n, 0), pr,
                                           {.rtol = 1e-5, .atol = 0, .atol_rms = 1e-5});
  EXPECT_EQ(cmp.wrong, 0);
}

// Negative control for the checker: a reference built with one 128x128 weight-block scale doubled
// disagrees with cuBLASLt exactly in that block's output columns.
TEST(GpuReference, WrongBlockScaleIsSeen) {
  WEAVE_REQUIRE_GPUS(1);
  Problem pr = make_problem(ScaleMode::kBlockscale, {100, 384, 640}, 11);
  pr.p.out_dtype = DType::kF32;
  bench::CublasLtGemm lt(pr.p, 0);
  DeviceBuffer c(pr.p.m * pr.p.n * 4), c_ref(pr.p.m * pr.p.n * 4);
  const TensorView cv = TensorView::matrix(c.get(), DType::kF32, pr.p.m, pr.p.n, 0);
  lt.run(pr.a.view, pr.b.view, lt.prepare_scales(pr.scales(), nullptr), cv, nullptr);
  ref::QuantMatrix qb_bad = pr.qb;
  qb_bad.scales[1 * qb_bad.scale_cols + 0] *= 2.0f;  // N block 1 (columns 128..255), K block 0
  DeviceOperand b_bad = bench::upload_operand(qb_bad, 0);
  bench::gpu_reference_gemm(pr.p, pr.a.view, b_bad.view, {pr.a.scale_view, b_bad.scale_view},
                            c_ref.as<float>(), nullptr);
  const ref::Comparison cmp = bench::gpu_compare(cv, c_ref.as<float>(),
                                                 bench::gemm_tolerance(ScaleMode::kBlockscale, DType::kF32), nullptr);
  EXPECT_GT(cmp.wrong, pr.p.m * 128 / 2);
  EXPECT_LE(cmp.wrong, pr.p.m * 128);
  EXPECT_EQ(cmp.first_wrong % pr.p.n / 128, 1);
  // The correct reference agrees (the control is the scale, nothing else).
  bench::gpu_reference_gemm(pr.p, pr.a.view, pr.b.view, pr.scales(), c_ref.as<float>(), nullptr);
  EXPECT_EQ(bench::gpu_compare(cv, c_ref.as<float>(), bench::gemm_tolerance(ScaleMode::kBlockscale, DType::kF32), nullptr).wrong, 0);
}

// The device compare kernel against planted faults, and against ref::compare on the same data.
TEST(GpuCompare, CountsPlantedErrorsExactly) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t rows = 333, cols = 250;
  const int64_t total = rows * cols;
  ref::Random rng(3);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    std::vector<float> refv = ref::random_normal(rng, total);
    if (dtype == DType::kBF16)  // make the reference representable, so unplanted elements are exact
      for (float& v : refv) v = ref::bf16_to_float(ref::float_to_bf16(v));
    std::vector<float> outv = refv;
    // Planted: 5 far-off values, 3 NaN, 2 Inf, 4 never written, 1 NaN where the reference is NaN
    // (agreement), 1 finite value where the reference is NaN (wrong).
    const int64_t off[] = {17, 4000, 50000, 60001, total - 1};
    for (int64_t i : off) outv[i] = refv[i] + 10.0f;
    const int64_t planted_nan[] = {100, 200, 300};  // NaNs other than the poison pattern
    for (int64_t i : {400, 500}) outv[i] = INFINITY;
    const int64_t never[] = {9, 1000, 2000, 70000};
    const int64_t nan_ok = 777, nan_bad = 888;
    refv[nan_ok] = NAN;
    refv[nan_bad] = NAN;
    outv[nan_bad] = 1.0f;
    // NaN bit patterns distinct from bench::poison_nan's, so only `never` reads as unwritten.
    constexpr uint32_t kOtherNanF32 = 0x7FC00001u;
    constexpr uint16_t kOtherNanBF16 = 0x7FC1u;
    const int64_t expect_wrong = 5 + 3 + 2 + 4 + 1;
    const int64_t expect_nonfinite = 3 + 2 + 4;

    DeviceBuffer d_ref(total * 4), d_out(total * dtype_bytes(dtype));
    d_ref.upload(refv.data(), d_ref.bytes());
    std::vector<double> ref64(refv.begin(), refv.end());
    ref::Comparison host;
    const double rtol = 1e-6, atol = 1e-6;
    if (dtype == DType::kF32) {
      std::vector<uint32_t> bits(total);
      std::memcpy(bits.data(), outv.data(), total * 4);
      for (int64_t i : planted_nan) bits[i] = kOtherNanF32;
      bits[nan_ok] = kOtherNanF32;
      for (int64_t i : never) bits[i] = ref::kPoisonF32;
      d_out.upload(bits.data(), d_out.bytes());
      std::vector<float> f(total);
      std::memcpy(f.data(), bits.data(), total * 4);
      host = ref::compare(f.data(), ref64.data(), total, rtol, atol);
    } else {
      std::vector<uint16_t> bits(total);
      for (int64_t i = 0; i < total; ++i) bits[i] = ref::float_to_bf16(outv[i]);
      for (int64_t i : planted_nan) bits[i] = kOtherNanBF16;
      bits[nan_ok] = kOtherNanBF16;
      for (int64_t i : never) bits[i] = ref::kPoisonBF16;
      d_out.upload(bits.data(), d_out.bytes());
      host = ref::compare_bf16(bits.data(), ref64.data(), total, rtol, atol);
    }
    const ref::Comparison dev = bench::gpu_compare(
        TensorView::matrix(d_out.get(), dtype, rows, cols, 0), d_ref.as<float>(),
        {.rtol = rtol, .atol = atol, .atol_rms = 0}, nullptr);
    EXPECT_EQ(dev.count, total);
    EXPECT_EQ(dev.wrong, expect_wrong) << to_string(dtype);
    EXPECT_EQ(dev.nonfinite, expect_nonfinite) << to_string(dtype);
    EXPECT_EQ(dev.never_written, 4) << to_string(dtype);
    EXPECT_EQ(dev.first_wrong, 9) << to_string(dtype);
    EXPECT_NEAR(dev.max_abs, 10.0, 0.05) << to_string(dtype);
    // Same verdicts as the host comparison.
    EXPECT_EQ(dev.wrong, host.wrong);
    EXPECT_EQ(dev.nonfinite, host.nonfinite);
    EXPECT_EQ(dev.never_written, host.never_written);
    EXPECT_EQ(dev.first_wrong, host.first_wrong);
    EXPECT_NEAR(dev.rel_l2, host.rel_l2, 1e-9 + 1e-6 * host.rel_l2);
    EXPECT_NEAR(dev.max_abs, host.max_abs, 1e-12);
  }
}

// atol_rms scales with the reference: the same relative fault is wrong or right depending on it.
TEST(GpuCompare, AtolRmsScalesWithTheReference) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t rows = 64, cols = 64, total = rows * cols;
  for (float scale : {1e-3f, 1.0f, 1e3f}) {
    std::vector<float> refv(total, scale), outv(total, scale);
    outv[10] = scale * 1.05f;  // off by 5% of rms
    DeviceBuffer d_ref(total * 4), d_out(total * 4);
    d_ref.upload(refv.data(), d_ref.bytes());
    d_out.upload(outv.data(), d_out.bytes());
    const TensorView ov = TensorView::matrix(d_out.get(), DType::kF32, rows, cols, 0);
    EXPECT_EQ(bench::gpu_compare(ov, d_ref.as<float>(), {.atol_rms = 0.1}, nullptr).wrong, 0) << scale;
    EXPECT_EQ(bench::gpu_compare(ov, d_ref.as<float>(), {.atol_rms = 0.01}, nullptr).wrong, 1) << scale;
  }
}
