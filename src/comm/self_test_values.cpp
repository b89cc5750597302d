#include "comm/self_test_values.hpp"

#include <cstring>

#include "common/check.hpp"
#include "weave/quant.hpp"

namespace weave::comm {

namespace {

// A full 64 -> 32 bit mix (splitmix64's finaliser) of (source, index, seed): neighbouring and
// periodic indices get unrelated values.
uint32_t mix(int src, std::size_t i, uint64_t seed) {
  uint64_t x = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(src) + 1) * 0xC2B2AE3D27D4EB4Full ^
               seed * 0x165667B19E3779F9ull;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<uint32_t>(x >> 16);
}

uint8_t ag_byte(int src, std::size_t i, uint64_t seed) { return static_cast<uint8_t>(mix(src, i, seed) >> 7); }
int digit(int src, std::size_t i, uint64_t seed) { return 1 + static_cast<int>(mix(src, i, seed) % 7u); }
float fp32_value(int src, std::size_t i, uint64_t seed) { return static_cast<float>(digit(src, i, seed) << (3 * src)); }
float bf16_value(int src, std::size_t i, uint64_t seed) { return static_cast<float>(static_cast<int>(mix(src, i, seed) % 7u) - 3); }

float value(const SelfTestShape& s, int src, std::size_t g) {
  return s.dtype == DType::kF32 ? fp32_value(src, g, s.seed) : bf16_value(src, g, s.seed);
}

void put(const SelfTestShape& s, std::vector<uint8_t>& out, std::size_t j, float v) {
  if (s.dtype == DType::kF32) {
    std::memcpy(&out[j * 4], &v, 4);
  } else {
    const uint16_t b = ref::float_to_bf16(v);
    std::memcpy(&out[j * 2], &b, 2);
  }
}

// The global input index of output element i (reduce-scatter: rank r's block of every input).
std::size_t input_index(const SelfTestShape& s, std::size_t i) {
  return s.op == CollectiveOp::kReduceScatter ? static_cast<std::size_t>(s.rank) * s.count + i : i;
}

void check_shape(const SelfTestShape& s) {
  WEAVE_EXPECT_ARG(s.world >= 1 && s.world <= 8, "self-test values: world must be 1..8 (got " << s.world << ")");
  WEAVE_EXPECT_ARG(s.rank >= 0 && s.rank < s.world, "self-test values: rank " << s.rank << " outside 0.." << s.world - 1);
  WEAVE_EXPECT_ARG(s.op == CollectiveOp::kAllGather || s.dtype == DType::kF32 || s.dtype == DType::kBF16,
                   "self-test values: reductions take fp32 or bf16");
}

}  // namespace

std::size_t self_test_in_elems(const SelfTestShape& s) {
  return s.op == CollectiveOp::kReduceScatter ? static_cast<std::size_t>(s.world) * s.count : s.count;
}
std::size_t self_test_out_elems(const SelfTestShape& s) {
  return s.op == CollectiveOp::kAllGather ? static_cast<std::size_t>(s.world) * s.count : s.count;
}
std::size_t self_test_elem_bytes(const SelfTestShape& s) {
  return s.op == CollectiveOp::kAllGather ? 1 : dtype_bytes(s.dtype);
}

std::vector<uint8_t> self_test_input(const SelfTestShape& s) {
  check_shape(s);
  const std::size_t n = self_test_in_elems(s);
  std::vector<uint8_t> in(n * self_test_elem_bytes(s));
  for (std::size_t j = 0; j < n; ++j) {
    if (s.op == CollectiveOp::kAllGather) in[j] = ag_byte(s.rank, j, s.seed);
    else put(s, in, j, value(s, s.rank, j));
  }
  return in;
}

std::vector<uint8_t> self_test_expected(const SelfTestShape& s) {
  check_shape(s);
  const std::size_t n = self_test_out_elems(s);
  std::vector<uint8_t> out(n * self_test_elem_bytes(s));
  for (std::size_t i = 0; i < n; ++i) {
    if (s.op == CollectiveOp::kAllGather) {
      out[i] = ag_byte(static_cast<int>(i / s.count), i % s.count, s.seed);
      continue;
    }
    float sum = 0;  // exact in both dtypes (see the header)
    for (int src = 0; src < s.world; ++src) sum += value(s, src, input_index(s, i));
    put(s, out, i, sum);
  }
  return out;
}

SelfTestCheck self_test_verify(const SelfTestShape& s, const std::vector<uint8_t>& got) {
  check_shape(s);
  const std::size_t n = self_test_out_elems(s);
  WEAVE_EXPECT_ARG(got.size() == n * self_test_elem_bytes(s),
                   "self-test verify: got " << got.size() << " bytes, expected " << n * self_test_elem_bytes(s));
  SelfTestCheck c;
  c.wrong_from_rank.assign(static_cast<std::size_t>(s.world), 0);
  auto wrong = [&](int src, std::size_t i) {
    ++c.wrong_from_rank[static_cast<std::size_t>(src)];
    if (c.first_wrong < 0) c.first_wrong = static_cast<int64_t>(i);
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (s.op == CollectiveOp::kAllGather) {
      const int src = static_cast<int>(i / s.count);
      if (got[i] != ag_byte(src, i % s.count, s.seed)) wrong(src, i);
      continue;
    }
    const std::size_t g = input_index(s, i);
    if (s.dtype == DType::kF32) {
      float f;
      std::memcpy(&f, &got[i * 4], 4);
      const double d = f;
      const bool integral = d >= 0 && d < 16777216.0 && d == static_cast<double>(static_cast<int64_t>(d));
      const int64_t v = integral ? static_cast<int64_t>(d) : -1;
      // Garbage (not a non-negative integer, or digits above the top source) charges every source.
      const bool garbage = v < 0 || (v >> (3 * s.world)) != 0;
      for (int src = 0; src < s.world; ++src)
        if (garbage || ((v >> (3 * src)) & 7) != digit(src, g, s.seed)) wrong(src, i);
    } else {
      uint16_t b;
      std::memcpy(&b, &got[i * 2], 2);
      float want = 0;
      for (int src = 0; src < s.world; ++src) want += value(s, src, g);
      if (ref::bf16_to_float(b) != want)
        for (int src = 0; src < s.world; ++src) wrong(src, i);  // a sum: no per-source attribution
    }
  }
  return c;
}

}  // namespace weave::comm
