// The self-test's values and check (comm/self_test_values), with planted faults: each fault a
// broken transport could produce must be caught and charged to the right source rank. The old
// check was position-blind (its fp32 digit did not depend on the index, its bf16 values repeated
// every 7) and ignored garbage above the top source's digit: with its formulas swapped in,
// MisplacedChunks, GarbageAboveTheTopDigit, TransportThatMovesNothing and EveryValueDependsOnTheIndex
// fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/self_test_values.hpp"

namespace weave::comm {
namespace {

std::vector<SelfTestShape> every_shape() {
  std::vector<SelfTestShape> out;
  for (CollectiveOp op : {CollectiveOp::kAllGather, CollectiveOp::kReduceScatter, CollectiveOp::kAllReduce})
    for (DType dt : {DType::kF32, DType::kBF16})
      for (int w : {1, 2, 4, 8})
        for (int r : {0, w - 1}) {
          if (op == CollectiveOp::kAllGather && dt == DType::kBF16) continue;  // all-gather moves bytes
          out.push_back({.op = op, .dtype = dt, .world = w, .rank = r, .count = 1031, .seed = 0x5eedull + static_cast<uint64_t>(w)});
        }
  return out;
}

// Output element i of a collective, as raw bytes.
void swap_elems(const SelfTestShape& s, std::vector<uint8_t>& v, std::size_t a, std::size_t b) {
  const std::size_t e = self_test_elem_bytes(s);
  std::swap_ranges(v.begin() + a * e, v.begin() + (a + 1) * e, v.begin() + b * e);
}

TEST(CommSelfTestValues, CorrectOutputPasses) {
  for (const auto& s : every_shape()) {
    const SelfTestCheck c = self_test_verify(s, self_test_expected(s));
    EXPECT_TRUE(c.ok()) << to_string(s.op) << " w" << s.world << " first " << c.first_wrong;
    for (auto v : c.wrong_from_rank) EXPECT_EQ(v, 0);
  }
}

TEST(CommSelfTestValues, MisplacedChunksAreCaught) {
  // A chunk written at the wrong offset (two 64-element runs swapped): the old fp32 check passed.
  for (const auto& s : every_shape()) {
    auto got = self_test_expected(s);
    for (std::size_t i = 0; i < 64; ++i) swap_elems(s, got, 100 + i, 300 + i);
    EXPECT_FALSE(self_test_verify(s, got).ok()) << to_string(s.op) << " " << to_string(s.dtype) << " w" << s.world;
    // One element shifted by one position.
    got = self_test_expected(s);
    swap_elems(s, got, 7, 8);
    const auto c = self_test_verify(s, got);
    EXPECT_FALSE(c.ok()) << to_string(s.op) << " " << to_string(s.dtype) << " w" << s.world;
    EXPECT_EQ(c.first_wrong, 7);
  }
}

TEST(CommSelfTestValues, GarbageAboveTheTopDigitIsCaught) {
  // fp32: the right digits plus a bit above the top source's digit (the old check noted it in the
  // detail but still reported ok).
  for (int w : {1, 2, 4, 7}) {
    const SelfTestShape s{.op = CollectiveOp::kAllReduce, .dtype = DType::kF32, .world = w, .rank = 0, .count = 64, .seed = 3};
    auto got = self_test_expected(s);
    float f;
    std::memcpy(&f, &got[5 * 4], 4);
    f += static_cast<float>(1 << (3 * w));
    std::memcpy(&got[5 * 4], &f, 4);
    const auto c = self_test_verify(s, got);
    EXPECT_FALSE(c.ok()) << "w" << w;
    for (auto v : c.wrong_from_rank) EXPECT_EQ(v, 1) << "w" << w;
  }
}

TEST(CommSelfTestValues, MissingSourceIsChargedToThatSource) {
  // fp32 reductions and all-gather attribute per source: drop source 1's contribution / block.
  for (const auto& s : every_shape()) {
    if (s.world < 2 || s.dtype == DType::kBF16) continue;
    auto got = self_test_expected(s);
    int64_t expect_wrong = static_cast<int64_t>(self_test_out_elems(s));
    if (s.op == CollectiveOp::kAllGather) {
      // Bytes that happen to equal the poison are right by chance.
      expect_wrong = static_cast<int64_t>(std::count_if(got.begin() + s.count, got.begin() + 2 * s.count,
                                                        [](uint8_t b) { return b != 0xFF; }));
      std::fill(got.begin() + s.count, got.begin() + 2 * s.count, 0xFF);  // block of source 1 untouched
    } else {
      // Subtract source 1's values: the sum of every source but 1.
      for (std::size_t i = 0; i < self_test_out_elems(s); ++i) {
        float f;
        std::memcpy(&f, &got[i * 4], 4);
        SelfTestShape one = s;
        one.rank = 1;
        one.op = CollectiveOp::kAllReduce;
        one.count = self_test_in_elems(s);
        const auto in1 = self_test_input(one);
        const std::size_t g = s.op == CollectiveOp::kReduceScatter ? s.rank * s.count + i : i;
        float v1;
        std::memcpy(&v1, &in1[g * 4], 4);
        f -= v1;
        std::memcpy(&got[i * 4], &f, 4);
      }
    }
    const auto c = self_test_verify(s, got);
    EXPECT_FALSE(c.ok());
    EXPECT_EQ(c.wrong_from_rank[1], expect_wrong) << to_string(s.op) << " w" << s.world;
    for (int src = 0; src < s.world; ++src)
      if (src != 1 && s.op == CollectiveOp::kAllGather) EXPECT_EQ(c.wrong_from_rank[src], 0);
  }
}

TEST(CommSelfTestValues, TransportThatMovesNothingFails) {
  // What a no-op transport leaves: the poison (0xFF), or (in place) this rank's own input.
  for (const auto& s : every_shape()) {
    std::vector<uint8_t> poison(self_test_out_elems(s) * self_test_elem_bytes(s), 0xFF);
    EXPECT_FALSE(self_test_verify(s, poison).ok()) << to_string(s.op) << " w" << s.world;
    if (s.world < 2) continue;
    if (s.op == CollectiveOp::kAllReduce) {
      EXPECT_FALSE(self_test_verify(s, self_test_input(s)).ok()) << "in-place all-reduce that moved nothing, w" << s.world;
    } else if (s.op == CollectiveOp::kAllGather) {
      std::vector<uint8_t> own(self_test_out_elems(s), 0xFF);
      const auto in = self_test_input(s);
      std::copy(in.begin(), in.end(), own.begin() + s.rank * s.count);
      EXPECT_FALSE(self_test_verify(s, own).ok()) << "all-gather with only the own block, w" << s.world;
    }
  }
}

TEST(CommSelfTestValues, EveryValueDependsOnTheIndex) {
  // No short period: the inputs of one source at indices i and i + p differ somewhere for every
  // p up to 64 (the old bf16 values repeated with period 7, fp32 digits with period 1).
  const SelfTestShape s{.op = CollectiveOp::kAllReduce, .dtype = DType::kF32, .world = 2, .rank = 1, .count = 4096, .seed = 9};
  const auto in = self_test_input(s);
  for (std::size_t p = 1; p <= 64; ++p) {
    bool differs = false;
    for (std::size_t i = 0; i + p < s.count && !differs; ++i) differs = std::memcmp(&in[i * 4], &in[(i + p) * 4], 4) != 0;
    EXPECT_TRUE(differs) << "period " << p;
  }
}

TEST(CommSelfTestValues, RefusesBadShapes) {
  EXPECT_ANY_THROW(self_test_input({.op = CollectiveOp::kAllReduce, .dtype = DType::kF32, .world = 9, .rank = 0, .count = 4}));
  EXPECT_ANY_THROW(self_test_input({.op = CollectiveOp::kAllReduce, .dtype = DType::kF32, .world = 2, .rank = 2, .count = 4}));
  const SelfTestShape s{.op = CollectiveOp::kAllReduce, .dtype = DType::kF32, .world = 2, .rank = 0, .count = 4};
  EXPECT_ANY_THROW(self_test_verify(s, std::vector<uint8_t>(3)));
}

}  // namespace
}  // namespace weave::comm
