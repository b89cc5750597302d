// The mxfp8 raw-scale staging on the CPU: which bytes the producer's cp.async copies read
// (gemm::raw_copy_extent) for every misalignment and chunk length, simulated against a byte
// array: every needed byte is read, nothing after a row's last needed byte is (so nothing past the
// scale tensor's end), and the consumer's funnel shift recovers exactly the chunk.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "gemm/mx_raw_copy.hpp"

namespace weave {
namespace {

TEST(GemmPlanMxRawCopy, ReadsExactlyUpToTheLastNeededByte) {
  for (int64_t off = 0; off < 64; ++off) {
    for (uint32_t need = 0; need <= 4; ++need) {
      const gemm::RawCopyExtent e = gemm::raw_copy_extent(off, need);
      ASSERT_EQ(e.word_off % 4, 0);
      ASSERT_LE(e.word_off, off);
      ASSERT_LE(e.n0, 4u);
      ASSERT_LE(e.n1, 4u);
      if (need == 0) {
        EXPECT_EQ(e.n0 + e.n1, 0u) << off;
        continue;
      }
      ASSERT_GE(off - e.word_off, 0);
      ASSERT_LT(off - e.word_off, 4);
      // Bytes read: [w, w + n0) and [w + 4, w + 4 + n1); contiguous when n1 > 0 (then n0 = 4).
      if (e.n1 > 0) ASSERT_EQ(e.n0, 4u);
      const int64_t last_read = e.n1 > 0 ? e.word_off + 4 + e.n1 - 1 : e.word_off + e.n0 - 1;
      EXPECT_EQ(last_read, off + need - 1) << "off " << off << " need " << need;  // never past the chunk
      EXPECT_LE(e.word_off + e.n0 + (e.n1 > 0 ? 4 : 0), off + need + 3);
    }
  }
}

// Simulates a raw scale tensor [rows, groups] with leading dimension ld placed at the very end of
// its memory, every 4-group chunk staged as the kernel does (zero-fill past n0 / n1), and the
// consumer's word = funnel shift of the two staged words by the row's misalignment.
TEST(GemmPlanMxRawCopy, StagedWordsEqualTheRowChunks) {
  for (int64_t groups : {1, 2, 3, 4, 5, 7, 20, 33}) {
    for (int64_t pad : {0, 1, 2, 3, 5}) {
      const int64_t ld = groups + pad, rows = 9;
      const int64_t bytes = (rows - 1) * ld + groups;  // the tensor ends exactly here
      std::vector<uint8_t> mem(static_cast<std::size_t>(bytes));
      for (int64_t i = 0; i < bytes; ++i) mem[i] = static_cast<uint8_t>(31 * i + 7);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t kb = 0; 4 * kb < groups; ++kb) {
          const int64_t off = r * ld + 4 * kb;
          const uint32_t need = static_cast<uint32_t>(std::min<int64_t>(4, groups - 4 * kb));
          const gemm::RawCopyExtent e = gemm::raw_copy_extent(off, need);
          uint8_t staged[8] = {};
          for (uint32_t i = 0; i < e.n0; ++i) {
            ASSERT_LT(e.word_off + i, bytes) << "read past the tensor";
            staged[i] = mem[e.word_off + i];
          }
          for (uint32_t i = 0; i < e.n1; ++i) {
            ASSERT_LT(e.word_off + 4 + i, bytes) << "read past the tensor";
            staged[4 + i] = mem[e.word_off + 4 + i];
          }
          uint64_t both = 0;
          for (int i = 7; i >= 0; --i) both = both << 8 | staged[i];
          const uint32_t word = static_cast<uint32_t>(both >> (8 * (off & 3)));  // __funnelshift_r
          for (uint32_t g = 0; g < need; ++g)
            ASSERT_EQ((word >> (8 * g)) & 0xFF, mem[off + g]) << "row " << r << " kb " << kb << " group " << g;
        }
      }
    }
  }
}

}  // namespace
}  // namespace weave
