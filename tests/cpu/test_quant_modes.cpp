// Quantisers and dequantisers of every scale mode against hand-computed cases.
#include <gtest/gtest.h>

#include "support/expect_error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "weave/error.hpp"
#include "weave/quant.hpp"
#include "weave/reference.hpp"

using namespace weave;
using namespace weave::ref;

namespace {
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

using weave::test::error_of;
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

// --- ptpc ---

TEST(QuantPtpc, ZeroRowGetsScaleOneAndRowAt448IsExact) {
  const std::vector<float> x = {0, 0, 0, 0,  448, -224, 1, 0.5f};
  for (Operand op : {Operand::kA, Operand::kB}) {
    const QuantMatrix q = quantize(x.data(), 2, 4, ScaleMode::kPtpc, op);
    EXPECT_EQ(q.scale_rows, 2);
    EXPECT_EQ(q.scale_cols, 1);
    EXPECT_EQ(q.scales, (std::vector<float>{1.0f, 1.0f}));
    EXPECT_EQ(q.e4m3, (std::vector<uint8_t>{0, 0, 0, 0, 0x7E, 0xF6, 0x38, 0x30}));
    EXPECT_TRUE(q.ue8m0.empty());
    EXPECT_EQ(dequantize(q, op), x);
  }
}

TEST(QuantPtpc, NonPowerOfTwoScaleRoundTripsClosely) {
  const std::vector<float> x = {3, -1.5f, 0, 0.75f};
  const QuantMatrix q = quantize(x.data(), 1, 4, ScaleMode::kPtpc, Operand::kA);
  EXPECT_EQ(q.scales[0], 3.0f / 448.0f);
  // 3 / s ~ 448, -1.5 / s ~ -224, 0.75 / s ~ 112 (E=13, M=6).
  EXPECT_EQ(q.e4m3, (std::vector<uint8_t>{0x7E, 0xF6, 0x00, 0x6E}));
  const auto d = dequantize(q, Operand::kA);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(d[i], x[i], 1e-6 * std::fabs(x[i])) << i;
}

TEST(QuantPtpc, NegativeFullScaleAndNaNRow) {
  const std::vector<float> x = {-448, 16, 1, 2,  1, kNaN, 3, 4};
  const QuantMatrix q = quantize(x.data(), 2, 4, ScaleMode::kPtpc, Operand::kB);
  EXPECT_EQ(q.scales[0], 1.0f);
  EXPECT_EQ(q.e4m3[0], 0xFE);
  EXPECT_EQ(q.e4m3[1], 0x58);  // 16 = 2^4: E=11
  EXPECT_TRUE(std::isnan(q.scales[1]));
  const auto d = dequantize(q, Operand::kB);
  for (int i = 4; i < 8; ++i) EXPECT_TRUE(std::isnan(d[i])) << i;  // the NaN row stays NaN
  EXPECT_EQ(d[0], -448.0f);
}

TEST(QuantPtpc, TinyRowDoesNotDivideByZero) {
  // amax = 2^-149: amax / 448 underflows to 0, so the row is treated as zero (scale 1).
  const std::vector<float> x = {std::numeric_limits<float>::denorm_min(), 0};
  const QuantMatrix q = quantize(x.data(), 1, 2, ScaleMode::kPtpc, Operand::kA);
  EXPECT_EQ(q.scales[0], 1.0f);
  EXPECT_EQ(q.e4m3, (std::vector<uint8_t>{0, 0}));
}

// --- blockscale ---

TEST(QuantBlockscale, OperandAHasOneScalePer1x128) {
  std::vector<float> x(2 * 256, 0.0f);
  x[0] = 896; x[1] = -2; x[2] = 1;                 // row 0, block 0: amax 896 -> scale 2
  x[256 + 128] = 7; x[256 + 129] = 1; x[256 + 130] = 3.5f;  // row 1, block 1: scale 7/448 = 1/64
  const QuantMatrix q = quantize(x.data(), 2, 256, ScaleMode::kBlockscale, Operand::kA);
  EXPECT_EQ(q.scale_rows, 2);
  EXPECT_EQ(q.scale_cols, 2);
  EXPECT_EQ(q.scales, (std::vector<float>{2.0f, 1.0f, 1.0f, 0.015625f}));
  EXPECT_EQ(q.e4m3[0], 0x7E);
  EXPECT_EQ(q.e4m3[1], 0xB8);  // -1
  EXPECT_EQ(q.e4m3[2], 0x30);  // 0.5
  EXPECT_EQ(q.e4m3[256 + 128], 0x7E);
  EXPECT_EQ(q.e4m3[256 + 129], 0x68);  // 64
  EXPECT_EQ(q.e4m3[256 + 130], 0x76);  // 224
  EXPECT_EQ(dequantize(q, Operand::kA), x);  // power-of-two scales: exact
}

TEST(QuantBlockscale, OperandBHas128x128BlocksWithPartialLastBlock) {
  const int64_t n = 130, k = 128;
  std::vector<float> x(n * k, 0.0f);
  x[0] = 224;                                          // block 0 amax 224 -> 0.5
  for (int64_t r = 1; r < 128; ++r) x[r * k + 3] = 1;  // -> 2 in e4m3
  x[128 * k + 0] = 896;                                // block 1 (rows 128..129) -> 2
  const QuantMatrix q = quantize(x.data(), n, k, ScaleMode::kBlockscale, Operand::kB);
  EXPECT_EQ(q.scale_rows, 2);
  EXPECT_EQ(q.scale_cols, 1);
  EXPECT_EQ(q.scales, (std::vector<float>{0.5f, 2.0f}));  // block 1 does not leak into block 0
  EXPECT_EQ(q.e4m3[0], 0x7E);
  EXPECT_EQ(q.e4m3[5 * k + 3], 0x40);
  EXPECT_EQ(q.e4m3[128 * k], 0x7E);
  EXPECT_EQ(q.e4m3[129 * k + 1], 0x00);
  EXPECT_EQ(dequantize(q, Operand::kB), x);
  // The same data as operand A gets a scale per row and 128 columns instead.
  const QuantMatrix qa = quantize(x.data(), n, k, ScaleMode::kBlockscale, Operand::kA);
  EXPECT_EQ(qa.scale_rows, n);
  EXPECT_EQ(qa.scales[0], 0.5f);
  EXPECT_EQ(qa.scales[5], 1.0f / 448.0f);
  EXPECT_EQ(qa.scales[129], 1.0f);  // zero row
}

// --- mxfp8 ---

TEST(QuantMxfp8, OperandAGroupsOf32) {
  std::vector<float> x(64, 0.0f);
  x[0] = 1.0f; x[1] = 0.5f; x[2] = 0.001f; x[3] = -0.75f;  // amax 1 -> shared -8, byte 119
  const QuantMatrix q = quantize(x.data(), 1, 64, ScaleMode::kMxfp8, Operand::kA);
  EXPECT_EQ(q.scale_rows, 1);
  EXPECT_EQ(q.scale_cols, 2);
  EXPECT_EQ(q.ue8m0, (std::vector<uint8_t>{119, 0}));  // group 1 is all zero -> byte 0
  EXPECT_TRUE(q.scales.empty());
  // x * 256: 256, 128, 0.256 -> 0.25, -192
  EXPECT_EQ(q.e4m3[0], 0x78);
  EXPECT_EQ(q.e4m3[1], 0x70);
  EXPECT_EQ(q.e4m3[2], 0x28);
  EXPECT_EQ(q.e4m3[3], 0xF4);
  for (int i = 32; i < 64; ++i) EXPECT_EQ(q.e4m3[i], 0) << i;
  const auto d = dequantize(q, Operand::kA);
  EXPECT_EQ(d[0], 1.0f);
  EXPECT_EQ(d[1], 0.5f);
  EXPECT_EQ(d[2], 0x1p-10f);
  EXPECT_EQ(d[3], -0.75f);
  EXPECT_EQ(d[40], 0.0f);
}

TEST(QuantMxfp8, OcpRuleSaturatesTheTopOfTheBinade) {
  // amax 1.9 -> shared -8; 1.9 * 256 = 486.4 > 448 saturates, so 1.9 comes back as 1.75.
  std::vector<float> x(32, 0.0f);
  x[7] = -1.9f;
  const QuantMatrix q = quantize(x.data(), 1, 32, ScaleMode::kMxfp8, Operand::kA);
  EXPECT_EQ(q.ue8m0[0], 119);
  EXPECT_EQ(q.e4m3[7], 0xFE);
  EXPECT_EQ(dequantize(q, Operand::kA)[7], -1.75f);
}

TEST(QuantMxfp8, TinyAmaxClampsTheExponentAndKeepsSubnormals) {
  std::vector<float> x(32, 0.0f);
  x[0] = 0x1p-125f;      // amax: floor(log2) - 8 = -133 -> clamped to -127, byte 0
  x[1] = 0x1p-130f;      // / 2^-127 = 0.125
  x[2] = 0x1p-137f;      // = 2^-10: tie, to zero
  x[3] = 3 * 0x1p-138f;  // = 0.75 * 2^-9 -> smallest subnormal
  x[4] = -0x1p-136f;     // = -2^-9 exactly
  const QuantMatrix q = quantize(x.data(), 1, 32, ScaleMode::kMxfp8, Operand::kA);
  EXPECT_EQ(q.ue8m0[0], 0);
  EXPECT_EQ(q.e4m3[0], 0x48);  // 4
  EXPECT_EQ(q.e4m3[1], 0x20);
  EXPECT_EQ(q.e4m3[2], 0x00);
  EXPECT_EQ(q.e4m3[3], 0x01);
  EXPECT_EQ(q.e4m3[4], 0x81);
  const auto d = dequantize(q, Operand::kA);
  EXPECT_EQ(d[0], 0x1p-125f);
  EXPECT_EQ(d[1], 0x1p-130f);
  EXPECT_EQ(d[3], 0x1p-136f);  // fp32 subnormal, exact
  EXPECT_EQ(d[4], -0x1p-136f);
}

TEST(QuantMxfp8, HugeAmaxUsesTheTopExponent) {
  std::vector<float> x(32, 0.0f);
  x[0] = std::numeric_limits<float>::max();  // floor(log2) = 127 -> shared 119, byte 246
  x[1] = 0x1p120f;                           // -> 2
  x[2] = -0x1p126f;                          // -> -128
  const QuantMatrix q = quantize(x.data(), 1, 32, ScaleMode::kMxfp8, Operand::kA);
  EXPECT_EQ(q.ue8m0[0], 246);
  EXPECT_EQ(q.e4m3[0], 0x7E);  // 511.99997 saturates
  EXPECT_EQ(q.e4m3[1], 0x40);
  EXPECT_EQ(q.e4m3[2], 0xF0);
  const auto d = dequantize(q, Operand::kA);
  EXPECT_EQ(d[0], 0x1.cp127f);  // 448 * 2^119, finite
  EXPECT_EQ(d[1], 0x1p120f);
  EXPECT_EQ(d[2], -0x1p126f);
}

TEST(QuantMxfp8, NaNOrInfInABlockGivesByteFFAndNaNOnDequantize) {
  std::vector<float> x(96, 1.0f);
  x[0] = 2.0f;
  x[5] = kNaN;    // group 0
  x[70] = -kInf;  // group 2
  const QuantMatrix q = quantize(x.data(), 1, 96, ScaleMode::kMxfp8, Operand::kA);
  EXPECT_EQ(q.ue8m0, (std::vector<uint8_t>{0xFF, 119, 0xFF}));
  EXPECT_EQ(q.e4m3[0], 0x78);  // scaled by the finite amax 2: shared -7, 2 * 128 = 256
  EXPECT_EQ(q.e4m3[5], 0x7F);
  const auto d = dequantize(q, Operand::kA);
  for (int i = 0; i < 32; ++i) EXPECT_TRUE(std::isnan(d[i])) << i;
  for (int i = 32; i < 64; ++i) EXPECT_EQ(d[i], 1.0f) << i;
  for (int i = 64; i < 96; ++i) EXPECT_TRUE(std::isnan(d[i])) << i;
}

TEST(QuantMxfp8, OperandBHas32x32BlocksWithPartialLastBlock) {
  const int64_t n = 40, k = 64;
  std::vector<float> x(n * k, 0.0f);
  x[0] = 1.0f;              // block (0,0): byte 119
  x[33 * k + 40] = 448.0f;  // block (1,1): byte 127
  x[35 * k + 2] = 0.5f;     // block (1,0): byte 118
  const QuantMatrix q = quantize(x.data(), n, k, ScaleMode::kMxfp8, Operand::kB);
  EXPECT_EQ(q.scale_rows, 2);
  EXPECT_EQ(q.scale_cols, 2);
  EXPECT_EQ(q.ue8m0, (std::vector<uint8_t>{119, 0, 118, 127}));
  EXPECT_EQ(q.e4m3[33 * k + 40], 0x7E);
  EXPECT_EQ(q.e4m3[35 * k + 2], 0x78);  // 0.5 / 2^-9 = 256
  EXPECT_EQ(dequantize(q, Operand::kB), x);
}

TEST(Dequantize, ScaleByteFFPropagatesNaN) {
  QuantMatrix q;
  q.rows = 1;
  q.cols = 64;
  q.mode = ScaleMode::kMxfp8;
  q.e4m3.assign(64, 0x38);  // 1.0
  q.e4m3[40] = 0x00;
  q.ue8m0 = {0xFF, 128};
  q.scale_rows = 1;
  q.scale_cols = 2;
  const auto d = dequantize(q, Operand::kA);
  for (int i = 0; i < 32; ++i) EXPECT_TRUE(std::isnan(d[i])) << i;
  for (int i = 32; i < 64; ++i) EXPECT_EQ(d[i], i == 40 ? 0.0f : 2.0f) << i;
}

TEST(Dequantize, E4m3NaNCodeAndBf16) {
  QuantMatrix q;
  q.rows = 1;
  q.cols = 3;
  q.mode = ScaleMode::kPtpc;
  q.e4m3 = {0x7F, 0xFF, 0x40};
  q.scales = {0.5f};
  q.scale_rows = 1;
  q.scale_cols = 1;
  const auto d = dequantize(q, Operand::kA);
  EXPECT_TRUE(std::isnan(d[0]));
  EXPECT_TRUE(std::isnan(d[1]));
  EXPECT_EQ(d[2], 1.0f);

  const std::vector<float> x = {1.0f + 0x1p-8f, -3.0f, 1e-3f};
  const QuantMatrix b = quantize(x.data(), 1, 3, ScaleMode::kBF16, Operand::kB);
  EXPECT_EQ(b.bf16, (std::vector<uint16_t>{0x3F80, 0xC040, 0x3A83}));
  EXPECT_TRUE(b.e4m3.empty());
  const auto db = dequantize(b, Operand::kB);
  EXPECT_EQ(db[0], 1.0f);
  EXPECT_EQ(db[1], -3.0f);
  EXPECT_EQ(db[2], 0x1.06p-10f);  // 0x3A83: 2^-10 * (1 + 3/128)
}

TEST(Dequantize, RejectsInconsistentMatrices) {
  const std::vector<float> x(64, 1.0f);
  QuantMatrix q = quantize(x.data(), 1, 64, ScaleMode::kMxfp8, Operand::kA);
  q.ue8m0.pop_back();
  EXPECT_TRUE(has(error_of([&] { dequantize(q, Operand::kA); }), "ue8m0 holds 1 bytes"));
  QuantMatrix p = quantize(x.data(), 2, 32, ScaleMode::kPtpc, Operand::kA);
  p.scale_rows = 1;
  EXPECT_TRUE(has(error_of([&] { dequantize(p, Operand::kA); }), "scale shape must be [2, 1]"));
  QuantMatrix m = quantize(x.data(), 2, 32, ScaleMode::kMxfp8, Operand::kA);
  // Two A rows have two scale rows; read as B (one 32x32 block) the scale shape no longer fits.
  EXPECT_TRUE(has(error_of([&] { dequantize(m, Operand::kB); }), "argument 'q'"));
}

// --- shape rules ---

TEST(Quantize, RejectsKNotAMultipleOfTheGroup) {
  const std::vector<float> x(2 * 160, 1.0f);
  for (Operand op : {Operand::kA, Operand::kB}) {
    auto msg = error_of([&] { quantize(x.data(), 2, 100, ScaleMode::kBlockscale, op); });
    EXPECT_TRUE(has(msg, "'cols' (K = 100)") && has(msg, "multiple of 128")) << msg;
    msg = error_of([&] { quantize(x.data(), 2, 160, ScaleMode::kBlockscale, op); });
    EXPECT_TRUE(has(msg, "multiple of 128")) << msg;
    msg = error_of([&] { quantize(x.data(), 2, 48, ScaleMode::kMxfp8, op); });
    EXPECT_TRUE(has(msg, "'cols' (K = 48)") && has(msg, "multiple of 32")) << msg;
  }
  // ptpc and bf16 have no K group.
  EXPECT_NO_THROW(quantize(x.data(), 2, 5, ScaleMode::kPtpc, Operand::kA));
  EXPECT_NO_THROW(quantize(x.data(), 2, 3, ScaleMode::kBF16, Operand::kB));
}

TEST(Quantize, RejectsBadArguments) {
  const std::vector<float> x(32, 1.0f);
  EXPECT_TRUE(has(error_of([&] { quantize(x.data(), 0, 32, ScaleMode::kMxfp8, Operand::kA); }), "'rows'"));
  EXPECT_TRUE(has(error_of([&] { quantize(x.data(), 1, 0, ScaleMode::kMxfp8, Operand::kA); }), "'cols'"));
  EXPECT_TRUE(has(error_of([&] { quantize(nullptr, 1, 32, ScaleMode::kMxfp8, Operand::kA); }), "'x'"));
  EXPECT_TRUE(has(error_of([&] { quantize(x.data(), 1, 32, static_cast<ScaleMode>(9), Operand::kA); }),
                  "'mode'"));
  EXPECT_TRUE(has(error_of([&] { quantize(x.data(), 1, 32, ScaleMode::kPtpc, static_cast<Operand>(5)); }),
                  "'operand'"));
}

// --- a bound that holds for every mode on random data (not hand-computed: a sanity net) ---

TEST(Quantize, RandomDataStaysWithinE4m3Precision) {
  Random rng(20240601);
  const int64_t rows = 67, cols = 256;
  const auto x = random_normal(rng, rows * cols, 3.0f);
  for (ScaleMode mode : {ScaleMode::kPtpc, ScaleMode::kBlockscale}) {
    for (Operand op : {Operand::kA, Operand::kB}) {
      const QuantMatrix q = quantize(x.data(), rows, cols, mode, op);
      const auto d = dequantize(q, op);
      // Half an e4m3 ulp is 2^-4 relative; below the normal range the absolute step is scale*2^-9.
      const float max_scale = *std::max_element(q.scales.begin(), q.scales.end());
      for (int64_t i = 0; i < rows * cols; ++i)
        ASSERT_LE(std::fabs(d[i] - x[i]), 0x1p-4f * std::fabs(x[i]) * 1.0001f + max_scale * 0x1p-10f)
            << to_string(mode) << " i=" << i;
    }
  }
}
