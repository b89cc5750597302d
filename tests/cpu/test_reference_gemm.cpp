// Reference GEMM: hand-computed products, bitwise agreement with a plain triple loop, exact
// integer GEMMs through every quantised mode, and the output rounding.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "weave/error.hpp"
#include "weave/quant.hpp"
#include "weave/reference.hpp"

using namespace weave;
using namespace weave::ref;

namespace {
std::vector<double> naive(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t n,
                          int64_t k) {
  std::vector<double> c(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t kk = 0; kk < k; ++kk) acc += double(a[i * k + kk]) * double(b[j * k + kk]);
      c[i * n + j] = acc;
    }
  return c;
}
// Integer dot products in int64: an oracle with no floating point at all.
std::vector<double> integer_gemm(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                                 int64_t n, int64_t k) {
  std::vector<double> c(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (int64_t kk = 0; kk < k; ++kk)
        acc += static_cast<int64_t>(a[i * k + kk]) * static_cast<int64_t>(b[j * k + kk]);
      c[i * n + j] = static_cast<double>(acc);
    }
  return c;
}
}  // namespace

TEST(ReferenceGemm, TinyHandComputed) {
  // A = [[1,2,3],[4,5,6]], B = [[1,0,-1],[2,1,0]]: C = A B^T = [[-2,4],[-2,13]]
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b = {1, 0, -1, 2, 1, 0};
  EXPECT_EQ(gemm_f64(a, b, 2, 2, 3), (std::vector<double>{-2, 4, -2, 13}));
  // One row, one column, K = 1.
  EXPECT_EQ(gemm_f64(std::vector<float>{3}, std::vector<float>{-0.5f}, 1, 1, 1), (std::vector<double>{-1.5}));
}

TEST(ReferenceGemm, AccumulatesInFp64) {
  // 2^24 + 1 + 1 - 2^24: fp32 accumulation would lose both ones; fp64 keeps them.
  const std::vector<float> a = {0x1p24f, 1, 1, -0x1p24f};
  const std::vector<float> b = {1, 1, 1, 1};
  EXPECT_EQ(gemm_f64(a, b, 1, 1, 4)[0], 2.0);
}

TEST(ReferenceGemm, MatchesTripleLoopBitwiseOnOddShapes) {
  Random rng(3);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{37, 29, 70}, {1, 1, 513}, {5, 130, 257},
                         {64, 128, 4096}}) {  // the last is large enough to run on several threads
    const auto a = random_normal(rng, m * k);
    const auto b = random_normal(rng, n * k);
    EXPECT_EQ(gemm_f64(a, b, m, n, k), naive(a, b, m, n, k)) << m << "x" << n << "x" << k;
  }
}

TEST(ReferenceGemm, PtpcWithRepresentableIntegersIsExact) {
  // Every row holds +-448 so its scale is exactly 1, and integers up to 16 are exact in e4m3.
  Random rng(5);
  const int64_t m = 9, n = 13, k = 48;
  auto a = random_integers(rng, m * k, 16);
  auto b = random_integers(rng, n * k, 16);
  for (int64_t i = 0; i < m; ++i) a[i * k + (i % k)] = (i % 2) ? 448.0f : -448.0f;
  for (int64_t j = 0; j < n; ++j) b[j * k + (3 * j % k)] = 448.0f;
  const QuantMatrix qa = quantize(a.data(), m, k, ScaleMode::kPtpc, Operand::kA);
  const QuantMatrix qb = quantize(b.data(), n, k, ScaleMode::kPtpc, Operand::kB);
  for (float s : qa.scales) ASSERT_EQ(s, 1.0f);
  const auto expected = integer_gemm(a, b, m, n, k);
  EXPECT_EQ(gemm_f64(qa, qb), expected);
  EXPECT_EQ(gemm_f64(dequantize(qa, Operand::kA), dequantize(qb, Operand::kB), m, n, k), expected);
}

TEST(ReferenceGemm, BlockscaleAndMxfp8WithPowerOfTwoScalesAreExact) {
  Random rng(6);
  {  // blockscale: one 448 per block gives scale 1; N = 130 leaves a partial B block.
    const int64_t m = 3, n = 130, k = 256;
    auto a = random_integers(rng, m * k, 16);
    auto b = random_integers(rng, n * k, 16);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t kb = 0; kb < k; kb += 128) a[i * k + kb] = 448;
    for (int64_t j = 0; j < n; j += 128)
      for (int64_t kb = 0; kb < k; kb += 128) b[j * k + kb + 1] = -448;
    const QuantMatrix qa = quantize(a.data(), m, k, ScaleMode::kBlockscale, Operand::kA);
    const QuantMatrix qb = quantize(b.data(), n, k, ScaleMode::kBlockscale, Operand::kB);
    EXPECT_EQ(gemm_f64(qa, qb), integer_gemm(a, b, m, n, k));
  }
  {  // mxfp8: one 16 per block gives shared exponent 4 - 8 = -4, so x * 16 <= 256 is exact.
    const int64_t m = 5, n = 40, k = 96;
    auto a = random_integers(rng, m * k, 16);
    auto b = random_integers(rng, n * k, 16);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t g = 0; g < k; g += 32) a[i * k + g] = 16;
    for (int64_t j = 0; j < n; j += 32)
      for (int64_t g = 0; g < k; g += 32) b[j * k + g + 5] = -16;
    const QuantMatrix qa = quantize(a.data(), m, k, ScaleMode::kMxfp8, Operand::kA);
    const QuantMatrix qb = quantize(b.data(), n, k, ScaleMode::kMxfp8, Operand::kB);
    for (uint8_t byte : qa.ue8m0) ASSERT_EQ(byte, 123);
    EXPECT_EQ(gemm_f64(qa, qb), integer_gemm(a, b, m, n, k));
  }
}

TEST(ReferenceGemm, NaNScalePropagatesIntoTheProduct) {
  const std::vector<float> ones(64, 1.0f);
  QuantMatrix qa = quantize(ones.data(), 1, 64, ScaleMode::kMxfp8, Operand::kA);
  const QuantMatrix qb = quantize(ones.data(), 1, 64, ScaleMode::kMxfp8, Operand::kB);
  EXPECT_EQ(gemm_f64(qa, qb)[0], 64.0);
  qa.ue8m0[1] = 0xFF;
  EXPECT_TRUE(std::isnan(gemm_f64(qa, qb)[0]));
}

TEST(ReferenceGemm, RejectsMismatchedOperands) {
  const std::vector<float> x(128, 1.0f);
  const QuantMatrix a = quantize(x.data(), 1, 128, ScaleMode::kMxfp8, Operand::kA);
  const QuantMatrix b = quantize(x.data(), 1, 128, ScaleMode::kBlockscale, Operand::kB);
  const QuantMatrix b64 = quantize(x.data(), 2, 64, ScaleMode::kMxfp8, Operand::kB);
  EXPECT_THROW(gemm_f64(a, b), Error);
  EXPECT_THROW(gemm_f64(a, b64), Error);
  EXPECT_THROW(gemm_f64(x, x, 1, 1, 64), Error);  // sizes do not match the shape
  EXPECT_THROW(gemm_f64(x, x, 0, 1, 128), Error);
}

TEST(RoundTo, Fp32AndBf16) {
  const std::vector<double> c = {1.0 + 0x1p-30, 1.0 + 3 * 0x1p-8, 1.0 + 0x1p-8 + 0x1p-20, 1e300, -0.0};
  EXPECT_EQ(round_to(c, DType::kF32),
            (std::vector<float>{1.0f, 1.01171875f, 1.0f + 0x1p-8f + 0x1p-20f, INFINITY, -0.0f}));
  EXPECT_EQ(round_to(c, DType::kBF16), (std::vector<float>{1.0f, 1.015625f, 1.0078125f, INFINITY, -0.0f}));
  // The contract rounds through fp32: 1 + 2^-8 + 2^-40 becomes 1 + 2^-8 in fp32, then a bf16 tie
  // that goes to 1.0 (straight from fp64 it would have gone up to 1 + 2^-7).
  EXPECT_EQ(round_to({1.0 + 0x1p-8 + 0x1p-40}, DType::kBF16)[0], 1.0f);
  EXPECT_TRUE(std::isnan(round_to({std::nan("")}, DType::kBF16)[0]));
  EXPECT_THROW(round_to(c, DType::kE4M3), Error);
}

TEST(ReferenceGemm, IsFastEnoughForTests) {
  Random rng(9);
  const int64_t m = 256, n = 512, k = 1024;
  const auto a = random_normal(rng, m * k);
  const auto b = random_normal(rng, n * k);
  const auto t0 = std::chrono::steady_clock::now();
  const auto c = gemm_f64(a, b, m, n, k);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("seconds_256x512x1024", std::to_string(seconds));
  std::printf("gemm_f64 256x512x1024: %.3f s\n", seconds);
  EXPECT_LT(seconds, 5.0);  // loose: a guard against an accidental quadratic slowdown, not a benchmark
  // Spot-check a few elements against the plain dot product.
  for (int64_t idx : {int64_t{0}, m * n / 2 + 7, m * n - 1}) {
    const int64_t i = idx / n, j = idx % n;
    double acc = 0;
    for (int64_t kk = 0; kk < k; ++kk) acc += double(a[i * k + kk]) * double(b[j * k + kk]);
    EXPECT_EQ(c[idx], acc);
  }
}
