// Scalar conversions of the reference numerics against hand-computed values, and against the
// CUDA toolkit's own host emulation of cvt.rn.satfinite.e4m3x2.f32 / cvt.rn.bf16.f32 (an
// independent implementation, compiled here for the host).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "weave/quant.hpp"

using namespace weave::ref;

namespace {
float f_bits(uint32_t bits) { return std::bit_cast<float>(bits); }
float up(float x) { return std::nextafter(x, INFINITY); }
float down(float x) { return std::nextafter(x, -INFINITY); }
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();
uint8_t cuda_e4m3(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
uint16_t cuda_bf16(float x) { return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x; }
}  // namespace

// --- e4m3 ---

TEST(E4m3, DecodesHandPickedCodes) {
  // value = 2^(E-7) * (1 + M/8) for E > 0, M * 2^-9 for E = 0 (code = s EEEE MMM).
  struct Case { uint8_t code; float value; };
  const Case cases[] = {
      {0x00, 0.0f},         {0x01, 0x1p-9f},  {0x07, 7 * 0x1p-9f}, {0x08, 0x1p-6f},  {0x20, 0.125f},
      {0x28, 0.25f},        {0x30, 0.5f},     {0x38, 1.0f},        {0x39, 1.125f},   {0x3F, 1.875f},
      {0x40, 2.0f},         {0x48, 4.0f},     {0x68, 64.0f},       {0x6E, 112.0f},   {0x70, 128.0f},
      {0x74, 192.0f},       {0x76, 224.0f},   {0x77, 240.0f},      {0x78, 256.0f},   {0x7D, 416.0f},
      {0x7E, 448.0f},       {0x81, -0x1p-9f}, {0xB8, -1.0f},       {0xF6, -224.0f},  {0xFE, -448.0f},
  };
  for (const auto& c : cases) EXPECT_EQ(e4m3_to_float(c.code), c.value) << "code 0x" << std::hex << int(c.code);
  EXPECT_EQ(e4m3_to_float(0x80), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
}

TEST(E4m3, AllCodesRoundTripAndAreOrdered) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    if ((code & 0x7F) == 0x7F) {
      EXPECT_EQ(float_to_e4m3(e4m3_to_float(code)), 0x7F) << "NaN code " << c;
      continue;
    }
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(code)), code) << "code " << c;
    EXPECT_EQ(e4m3_to_float(code | 0x80), -e4m3_to_float(code & 0x7F)) << "code " << c;
  }
  for (int c = 1; c <= 0x7E; ++c)
    EXPECT_LT(e4m3_to_float(static_cast<uint8_t>(c - 1)), e4m3_to_float(static_cast<uint8_t>(c))) << c;
}

TEST(E4m3, TiesGoToEvenInSeveralBinades) {
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);        // 1 | 1.125: to M=0
  EXPECT_EQ(float_to_e4m3(up(1.0625f)), 0x39);
  EXPECT_EQ(float_to_e4m3(down(1.0625f)), 0x38);
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3A);        // 1.125 (M=1) | 1.25 (M=2)
  EXPECT_EQ(float_to_e4m3(1.9375f), 0x40);        // 1.875 (M=7) | 2.0: carries into the exponent
  EXPECT_EQ(float_to_e4m3(down(1.9375f)), 0x3F);
  EXPECT_EQ(float_to_e4m3(272.0f), 0x78);         // 256 | 288
  EXPECT_EQ(float_to_e4m3(304.0f), 0x7A);         // 288 (M=1) | 320 (M=2)
  EXPECT_EQ(float_to_e4m3(432.0f), 0x7E);         // 416 (M=5) | 448 (M=6)
  EXPECT_EQ(float_to_e4m3(down(432.0f)), 0x7D);
  EXPECT_EQ(float_to_e4m3(0x1p-6f + 0x1p-10f), 0x08);      // 2^-6 | 2^-6 + 2^-9
  EXPECT_EQ(float_to_e4m3(0x1p-6f + 3 * 0x1p-10f), 0x0A);  // M=1 | M=2
  EXPECT_EQ(float_to_e4m3(-1.1875f), 0xBA);
  EXPECT_EQ(float_to_e4m3(-304.0f), 0xFA);
}

TEST(E4m3, SaturatesBeyond448) {
  const float big[] = {447.0f, 448.0f, up(448.0f), 464.0f, up(464.0f), 480.0f, 512.0f,
                       1e6f,   std::numeric_limits<float>::max(), kInf};
  for (float x : big) {
    EXPECT_EQ(float_to_e4m3(x), 0x7E) << x;
    EXPECT_EQ(float_to_e4m3(-x), 0xFE) << -x;
  }
}

TEST(E4m3, SubnormalBoundaries) {
  EXPECT_EQ(float_to_e4m3(0x1p-9f), 0x01);          // smallest subnormal
  EXPECT_EQ(float_to_e4m3(0x1p-10f), 0x00);         // half of it: tie to even zero
  EXPECT_EQ(float_to_e4m3(up(0x1p-10f)), 0x01);
  EXPECT_EQ(float_to_e4m3(3 * 0x1p-10f), 0x02);     // 1.5 quanta: 1 | 2
  EXPECT_EQ(float_to_e4m3(5 * 0x1p-10f), 0x02);     // 2.5: 2 | 3
  EXPECT_EQ(float_to_e4m3(7 * 0x1p-10f), 0x04);     // 3.5: 3 | 4
  EXPECT_EQ(float_to_e4m3(13 * 0x1p-10f), 0x06);    // 6.5: 6 | 7
  EXPECT_EQ(float_to_e4m3(15 * 0x1p-10f), 0x08);    // 7.5: largest subnormal | smallest normal
  EXPECT_EQ(float_to_e4m3(down(15 * 0x1p-10f)), 0x07);
  EXPECT_EQ(float_to_e4m3(down(0x1p-6f)), 0x08);    // just under the smallest normal
  EXPECT_EQ(float_to_e4m3(0x1p-7f), 0x04);
  EXPECT_EQ(float_to_e4m3(1.1f * 0x1p-7f), 0x04);   // 4.4 quanta
  EXPECT_EQ(float_to_e4m3(0x1p-8f), 0x02);
  EXPECT_EQ(float_to_e4m3(-0x1p-9f), 0x81);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::min()), 0x00);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::denorm_min()), 0x80);
}

TEST(E4m3, ZerosAndNaN) {
  EXPECT_EQ(float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3(kNaN), 0x7F);
  EXPECT_EQ(float_to_e4m3(-kNaN), 0x7F);               // canonical NaN, sign dropped
  EXPECT_EQ(float_to_e4m3(f_bits(0x7F800001u)), 0x7F); // signalling NaN
  EXPECT_EQ(float_to_e4m3(f_bits(0xFFFFFFFFu)), 0x7F);
}

TEST(E4m3, MatchesCudaHostEmulationOfCvtSatfinite) {
  int64_t mismatches = 0;
  auto check = [&](float x) {
    if (float_to_e4m3(x) != cuda_e4m3(x) && ++mismatches <= 10)
      ADD_FAILURE() << "x = " << x << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(x) << "): ours 0x"
                    << int(float_to_e4m3(x)) << ", cuda 0x" << int(cuda_e4m3(x));
  };
  // Every rounding boundary: each midpoint between neighbouring codes (and 448 | 480, the
  // saturation tie), with the 8 floats either side, in both signs.
  for (int c = 0; c <= 0x7E; ++c) {
    const float lo = e4m3_to_float(static_cast<uint8_t>(c));
    const float hi = c == 0x7E ? 480.0f : e4m3_to_float(static_cast<uint8_t>(c + 1));
    float x = (lo + hi) / 2;
    for (int i = 0; i < 8; ++i) x = down(x);
    for (int i = 0; i < 17; ++i, x = up(x)) {
      check(x);
      check(-x);
    }
  }
  // A sweep across all 2^32 bit patterns (stride coprime to every field width), and densely
  // through the binades e4m3 resolves.
  for (uint64_t bits = 0; bits < (1ull << 32); bits += 251) check(f_bits(static_cast<uint32_t>(bits)));
  for (uint32_t bits = std::bit_cast<uint32_t>(0x1p-11f); bits <= std::bit_cast<uint32_t>(1024.0f); bits += 7)
    check(f_bits(bits));
  EXPECT_EQ(mismatches, 0);
}

// --- bf16 ---

TEST(Bf16, HandComputedRounding) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3F80);      // tie: 1 (even) | 1 + 2^-7
  EXPECT_EQ(float_to_bf16(up(1.0f + 0x1p-8f)), 0x3F81);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);  // tie: 0x3F81 (odd) | 0x3F82
  EXPECT_EQ(float_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_bf16(3.140625f), 0x4049);
  EXPECT_EQ(float_to_bf16(f_bits(0x3F80FFFFu)), 0x3F81);
  EXPECT_EQ(float_to_bf16(f_bits(0x00018000u)), 0x0002);  // fp32 subnormal tie, odd -> up
  EXPECT_EQ(float_to_bf16(f_bits(0x00008000u)), 0x0000);  // tie, even -> down
  EXPECT_EQ(float_to_bf16(f_bits(0x7F7F7FFFu)), 0x7F7F);  // largest bf16
  EXPECT_EQ(float_to_bf16(f_bits(0x7F7F8000u)), 0x7F80);  // its tie with 2^128 rounds to Inf
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(float_to_bf16(kInf), 0x7F80);
  EXPECT_EQ(float_to_bf16(-kInf), 0xFF80);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(kNaN), 0x7FFF);
  EXPECT_EQ(float_to_bf16(-kNaN), 0x7FFF);
  EXPECT_EQ(float_to_bf16(f_bits(0x7F800001u)), 0x7FFF);  // a NaN whose top half looks like Inf
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
  EXPECT_EQ(bf16_to_float(0xC000), -2.0f);
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7FC0)));
}

TEST(Bf16, AllCodesRoundTrip) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const auto code = static_cast<uint16_t>(c);
    if ((code & 0x7F80) == 0x7F80 && (code & 0x7F) != 0) continue;  // NaN payloads
    EXPECT_EQ(float_to_bf16(bf16_to_float(code)), code) << c;
  }
}

TEST(Bf16, MatchesCudaHostEmulation) {
  int64_t mismatches = 0;
  for (uint64_t bits = 0; bits < (1ull << 32); bits += 97) {
    const float x = f_bits(static_cast<uint32_t>(bits));
    if (float_to_bf16(x) != cuda_bf16(x) && ++mismatches <= 10)
      ADD_FAILURE() << "bits 0x" << std::hex << bits << ": ours 0x" << float_to_bf16(x) << ", cuda 0x"
                    << cuda_bf16(x);
  }
  EXPECT_EQ(mismatches, 0);
}

// --- ue8m0 and the OCP MX shared exponent ---

TEST(Ue8m0, Values) {
  EXPECT_EQ(ue8m0_to_float(127), 1.0f);
  EXPECT_EQ(ue8m0_to_float(128), 2.0f);
  EXPECT_EQ(ue8m0_to_float(119), 0.00390625f);
  EXPECT_EQ(ue8m0_to_float(254), 0x1p127f);
  EXPECT_EQ(static_cast<double>(ue8m0_to_float(0)), 0x1p-127);  // an fp32 subnormal, exact
  EXPECT_TRUE(std::isnan(ue8m0_to_float(255)));
}

TEST(MxScaleByte, OcpRuleFromTheExponentBits) {
  // byte = clamp(floor(log2(amax)) - 8, -127, 127) + 127
  EXPECT_EQ(mx_scale_byte(1.0f), 119);
  EXPECT_EQ(mx_scale_byte(1.5f), 119);
  EXPECT_EQ(mx_scale_byte(down(1.0f)), 118);  // floor(log2) = -1 just below 1
  EXPECT_EQ(mx_scale_byte(0.75f), 118);
  EXPECT_EQ(mx_scale_byte(448.0f), 127);      // 448 itself scales by 1
  EXPECT_EQ(mx_scale_byte(down(512.0f)), 127);
  EXPECT_EQ(mx_scale_byte(512.0f), 128);
  EXPECT_EQ(mx_scale_byte(std::numeric_limits<float>::max()), 246);  // 127 - 8 + 127
  EXPECT_EQ(mx_scale_byte(0x1p-118f), 1);
  EXPECT_EQ(mx_scale_byte(0x1p-119f), 0);     // -127 exactly
  EXPECT_EQ(mx_scale_byte(0x1p-120f), 0);     // -128 clamps to -127
  EXPECT_EQ(mx_scale_byte(std::numeric_limits<float>::min()), 0);
  EXPECT_EQ(mx_scale_byte(std::numeric_limits<float>::denorm_min()), 0);
  EXPECT_EQ(mx_scale_byte(0.0f), 0);
  EXPECT_EQ(mx_scale_byte(-0.0f), 0);
  EXPECT_EQ(mx_scale_byte(kNaN), 0xFF);
  EXPECT_EQ(mx_scale_byte(kInf), 0xFF);
}
