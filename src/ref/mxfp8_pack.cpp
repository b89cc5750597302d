// mxfp8 scale bytes: raw [rows, k_groups] <-> packed uint32 [ceil(k_groups/4), rows].
// Word (s, r) holds groups 4s..4s+3 of row r, group 4s in the low byte; groups past k_groups are
// 127 (2^0), so a kernel stepping K by 128 reads whole words and a padded group scales by 1.
#include "common/check.hpp"
#include "weave/quant.hpp"

namespace weave::ref {

namespace {
constexpr int kGroupsPerWord = 4;
constexpr uint8_t kPadByte = 127;  // ue8m0 for 1.0

void expect_pack_args(const void* p, const char* name, int64_t rows, int64_t k_groups) {
  WEAVE_EXPECT_ARG(rows >= 1, "argument 'rows': must be >= 1, got " << rows);
  WEAVE_EXPECT_ARG(k_groups >= 1, "argument 'k_groups': must be >= 1, got " << k_groups);
  WEAVE_EXPECT_ARG(p != nullptr, "argument '" << name << "': must not be null");
}
}  // namespace

std::vector<uint32_t> pack_mxfp8_scales(const uint8_t* raw, int64_t rows, int64_t k_groups) {
  expect_pack_args(raw, "raw", rows, k_groups);
  const int64_t steps = (k_groups + kGroupsPerWord - 1) / kGroupsPerWord;
  std::vector<uint32_t> packed(static_cast<std::size_t>(steps * rows));
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t r = 0; r < rows; ++r) {
      uint32_t word = 0;
      for (int j = 0; j < kGroupsPerWord; ++j) {
        const int64_t g = s * kGroupsPerWord + j;
        const uint8_t byte = g < k_groups ? raw[r * k_groups + g] : kPadByte;
        word |= static_cast<uint32_t>(byte) << (8 * j);
      }
      packed[static_cast<std::size_t>(s * rows + r)] = word;
    }
  }
  return packed;
}

std::vector<uint8_t> unpack_mxfp8_scales(const uint32_t* packed, int64_t rows, int64_t k_groups) {
  expect_pack_args(packed, "packed", rows, k_groups);
  std::vector<uint8_t> raw(static_cast<std::size_t>(rows * k_groups));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < k_groups; ++g) {
      const uint32_t word = packed[(g / kGroupsPerWord) * rows + r];
      raw[static_cast<std::size_t>(r * k_groups + g)] =
          static_cast<uint8_t>(word >> (8 * (g % kGroupsPerWord)));
    }
  }
  return raw;
}

}  // namespace weave::ref
