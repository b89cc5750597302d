// Comparison metrics against hand-computed cases.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "weave/error.hpp"
#include "weave/reference.hpp"

using namespace weave;
using namespace weave::ref;

namespace {
const float kPoison = std::bit_cast<float>(kPoisonF32);
const float kOtherNaN = std::bit_cast<float>(0x7FFFFFFFu);  // the NaN a GPU computes
}  // namespace

TEST(Compare, EqualArraysAreClean) {
  const std::vector<float> out = {1, -2, 0.5f};
  const std::vector<double> ref = {1, -2, 0.5};
  const auto c = compare(out.data(), ref.data(), 3, 0, 0);
  EXPECT_EQ(c.count, 3);
  EXPECT_EQ(c.wrong, 0);
  EXPECT_EQ(c.nonfinite, 0);
  EXPECT_EQ(c.never_written, 0);
  EXPECT_EQ(c.rel_l2, 0);
  EXPECT_EQ(c.max_abs, 0);
  EXPECT_EQ(c.first_wrong, -1);
}

TEST(Compare, RelativeL2AndMaxAbs) {
  const std::vector<float> out = {3, 4.5f};
  const std::vector<double> ref = {3, 4};
  const auto c = compare(out.data(), ref.data(), 2, 0, 1);  // atol 1: nothing wrong
  EXPECT_DOUBLE_EQ(c.rel_l2, 0.1);  // sqrt(0.25) / sqrt(25)
  EXPECT_EQ(c.max_abs, 0.5);
  EXPECT_EQ(c.wrong, 0);
}

TEST(Compare, ToleranceBoundaryIsInclusive) {
  // atol 0.25 + rtol 2^-5 * |8| = 0.5: 8.5 passes, the next float up fails.
  const std::vector<double> ref = {8, 8, 8};
  const std::vector<float> out = {8.5f, std::nextafter(8.5f, 9.0f), 7.5f};
  const auto c = compare(out.data(), ref.data(), 3, 0x1p-5, 0.25);
  EXPECT_EQ(c.wrong, 1);
  EXPECT_EQ(c.first_wrong, 1);
}

TEST(Compare, PoisonNaNAndInfAreCountedApart) {
  const std::vector<double> ref = {1, 2, 3, 4, 5};
  const std::vector<float> out = {1, kPoison, kOtherNaN, INFINITY, 5.5f};
  const auto c = compare(out.data(), ref.data(), 5, 0, 0.1);
  EXPECT_EQ(c.never_written, 1);  // only the exact poison pattern
  EXPECT_EQ(c.nonfinite, 3);
  EXPECT_EQ(c.wrong, 4);
  EXPECT_EQ(c.first_wrong, 1);
  EXPECT_DOUBLE_EQ(c.max_abs, 0.5);  // over finite pairs only
}

TEST(Compare, NonFiniteReferenceMustBeMatchedInKind) {
  const double nan = std::nan("");
  const std::vector<double> ref = {nan, nan, nan, INFINITY, -INFINITY};
  const std::vector<float> out = {kOtherNaN, 1.0f, kPoison, INFINITY, INFINITY};
  const auto c = compare(out.data(), ref.data(), 5, 0.1, 0.1);
  EXPECT_EQ(c.wrong, 3);       // 1.0 for NaN, poison (never written), +Inf for -Inf
  EXPECT_EQ(c.first_wrong, 1);
  EXPECT_EQ(c.never_written, 1);
  EXPECT_EQ(c.nonfinite, 0);   // counted only where the reference is finite
  EXPECT_EQ(c.rel_l2, 0);
}

TEST(Compare, ZeroReference) {
  const std::vector<double> ref = {0, 0};
  const std::vector<float> zero = {0, -0.0f};
  const std::vector<float> off = {0, 1e-3f};
  EXPECT_EQ(compare(zero.data(), ref.data(), 2, 0, 0).rel_l2, 0);
  const auto c = compare(off.data(), ref.data(), 2, 0, 0);
  EXPECT_TRUE(std::isinf(c.rel_l2));
  EXPECT_EQ(c.wrong, 1);
}

TEST(CompareBf16, PoisonAndValues) {
  const std::vector<double> ref = {1, 2, 3, 3.0};
  const std::vector<uint16_t> out = {0x3F80, kPoisonBF16, 0x7FFF, 0x4041};  // 1, poison, NaN, 3.015625
  const auto c = compare_bf16(out.data(), ref.data(), 4, 0x1p-7, 0);
  EXPECT_EQ(c.never_written, 1);
  EXPECT_EQ(c.nonfinite, 2);
  EXPECT_EQ(c.wrong, 2);  // 3.015625 is within 2^-7 * 3 = 0.0234
  EXPECT_EQ(c.first_wrong, 1);
  EXPECT_DOUBLE_EQ(c.max_abs, 0.015625);
}

TEST(Compare, RejectsBadArguments) {
  const float out[1] = {0};
  const double ref[1] = {0};
  EXPECT_THROW(compare(out, ref, -1, 0, 0), Error);
  EXPECT_THROW(compare(nullptr, ref, 1, 0, 0), Error);
  EXPECT_THROW(compare(out, nullptr, 1, 0, 0), Error);
  EXPECT_THROW(compare(out, ref, 1, -0.1, 0), Error);
  EXPECT_THROW(compare(out, ref, 1, 0, std::nan("")), Error);
  EXPECT_THROW(compare_bf16(nullptr, ref, 1, 0, 0), Error);
  EXPECT_EQ(compare(nullptr, nullptr, 0, 0, 0).count, 0);
}
