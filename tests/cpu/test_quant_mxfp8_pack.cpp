// mxfp8 scale packing: raw [rows, k_groups] bytes <-> packed uint32 [ceil(k_groups/4), rows].
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "weave/error.hpp"
#include "weave/quant.hpp"
#include "weave/reference.hpp"

using namespace weave;
using namespace weave::ref;

TEST(Mxfp8Pack, HandComputedWordLayout) {
  // 2 rows x 5 groups: word (s, r) = groups 4s..4s+3 of row r, low byte first; pad 127 (0x7F).
  const std::vector<uint8_t> raw = {1, 2, 3, 4, 5,  6, 7, 8, 9, 10};
  const auto packed = pack_mxfp8_scales(raw.data(), 2, 5);
  const std::vector<uint32_t> expected = {0x04030201u, 0x09080706u, 0x7F7F7F05u, 0x7F7F7F0Au};
  EXPECT_EQ(packed, expected);
  EXPECT_EQ(unpack_mxfp8_scales(packed.data(), 2, 5), raw);
}

TEST(Mxfp8Pack, SingleGroupAndExactMultiple) {
  const std::vector<uint8_t> one = {0xFF, 0x00, 0x80};  // 3 rows x 1 group
  EXPECT_EQ(pack_mxfp8_scales(one.data(), 3, 1),
            (std::vector<uint32_t>{0x7F7F7FFFu, 0x7F7F7F00u, 0x7F7F7F80u}));
  const std::vector<uint8_t> four = {0x11, 0x22, 0x33, 0x44};  // 1 row x 4 groups: no padding
  EXPECT_EQ(pack_mxfp8_scales(four.data(), 1, 4), (std::vector<uint32_t>{0x44332211u}));
}

TEST(Mxfp8Pack, IsABijectionOnRawBytes) {
  Random rng(7);
  for (int64_t rows : {1, 2, 3, 5, 7, 33}) {
    for (int64_t k_groups : {1, 2, 3, 4, 5, 9, 56}) {
      std::vector<uint8_t> raw(rows * k_groups);
      for (auto& b : raw) b = static_cast<uint8_t>(rng.integer(0, 255));
      raw.front() = 0x00;  // the extremes always appear
      raw.back() = 0xFF;
      const auto packed = pack_mxfp8_scales(raw.data(), rows, k_groups);
      const int64_t steps = (k_groups + 3) / 4;
      ASSERT_EQ(packed.size(), static_cast<size_t>(steps * rows));
      EXPECT_EQ(unpack_mxfp8_scales(packed.data(), rows, k_groups), raw) << rows << "x" << k_groups;
      // Padding bytes are 127 and nothing else; so pack(unpack(p)) == p for every valid p.
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t g = k_groups; g < steps * 4; ++g)
          EXPECT_EQ((packed[(g / 4) * rows + r] >> (8 * (g % 4))) & 0xFF, 127u);
      // Changing any one raw byte changes the packed words (injective, with the inverse above).
      auto changed = raw;
      changed[(rows * k_groups) / 2] ^= 0x5A;
      EXPECT_NE(pack_mxfp8_scales(changed.data(), rows, k_groups), packed);
    }
  }
}

TEST(Mxfp8Pack, RejectsBadArguments) {
  const uint8_t raw[4] = {};
  const uint32_t packed[1] = {};
  EXPECT_THROW(pack_mxfp8_scales(raw, 0, 4), Error);
  EXPECT_THROW(pack_mxfp8_scales(raw, 1, 0), Error);
  EXPECT_THROW(pack_mxfp8_scales(nullptr, 1, 4), Error);
  EXPECT_THROW(unpack_mxfp8_scales(nullptr, 1, 4), Error);
  EXPECT_THROW(unpack_mxfp8_scales(packed, -1, 4), Error);
}

TEST(Mxfp8Pack, PacksWhatTheQuantiserProduces) {
  // K = 160 (5 groups) for 3 rows of A: the packed order still unpacks to the quantiser's bytes.
  Random rng(11);
  const auto x = random_normal(rng, 3 * 160);
  const QuantMatrix q = quantize(x.data(), 3, 160, ScaleMode::kMxfp8, Operand::kA);
  const auto packed = pack_mxfp8_scales(q.ue8m0.data(), q.scale_rows, q.scale_cols);
  EXPECT_EQ(unpack_mxfp8_scales(packed.data(), q.scale_rows, q.scale_cols), q.ue8m0);
  EXPECT_EQ(packed[1 * 3 + 2] & 0xFF, q.ue8m0[2 * 5 + 4]);  // group 4 of row 2: step 1, low byte
}

// Blockscale A scales row-major [rows, k_blocks] -> M-contiguous [k_blocks][ld], ld = rows
// rounded up to 4, padding 0 (ScaleLayout::kMnMajor).
TEST(BlockScaleMnMajor, HandComputedLayout) {
  const std::vector<float> row_major = {1, 2, 3, 4, 5, 6};  // 3 rows x 2 K blocks
  EXPECT_EQ(mn_major_scale_ld(3), 4);
  EXPECT_EQ(mn_major_scale_ld(4), 4);
  EXPECT_EQ(mn_major_scale_ld(1), 4);
  EXPECT_EQ(mn_major_block_scales(row_major.data(), 3, 2), (std::vector<float>{1, 3, 5, 0, 2, 4, 6, 0}));
  EXPECT_EQ(mn_major_block_scales(row_major.data(), 6, 1), (std::vector<float>{1, 2, 3, 4, 5, 6, 0, 0}));
}

TEST(BlockScaleMnMajor, RefusesBadArguments) {
  const float one = 1.0f;
  EXPECT_THROW(mn_major_block_scales(&one, 0, 1), Error);
  EXPECT_THROW(mn_major_block_scales(&one, 1, 0), Error);
  EXPECT_THROW(mn_major_block_scales(nullptr, 1, 1), Error);
}
