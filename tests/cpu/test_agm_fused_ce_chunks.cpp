// AllGatherGemm fused-ce's chunking (fused/ag_gemm/fused_ce.hpp), exactly what the copy streams
// pull and the GEMM kernel's producer waits for: every source row in exactly one chunk, chunks of
// whole 128-row tiles, at most comm::kMaxChunks; and the rows a tile waits for (the walk of
// EpilogueAgmRows::wait_rows, replayed on the host) cover every peer row it reads and no own row.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <utility>

#include "comm/protocol.hpp"
#include "fused/ag_gemm/fused_ce.hpp"

using namespace weave;

namespace {

// The (source, chunk) pairs the producer of a tile at row m0 waits for (wait_rows' loop).
std::set<std::pair<int, int>> waited(const fused::AgmChunks& ch, int world, int rank, int64_t m0, int block_m) {
  std::set<std::pair<int, int>> out;
  const int64_t m = ch.m, end = std::min<int64_t>(m0 + block_m, int64_t(world) * m);
  for (int64_t row = m0; row < end;) {
    const int q = static_cast<int>(row / m);
    const int c = static_cast<int>((row - q * m) / ch.chunk_rows);
    if (q != rank) out.insert({q, c});
    row = q * m + std::min<int64_t>(m, int64_t(c + 1) * ch.chunk_rows);
  }
  return out;
}

}  // namespace

TEST(AgmFusedCeChunks, EveryRowInOneChunkOfWholeTilesAtMostMaxChunks) {
  for (int64_t m : {1, 2, 7, 127, 128, 129, 1000, 2048, 2049, 4096, 16384, 65536, 100003}) {
    const fused::AgmChunks ch = fused::agm_chunks(m, 128);
    EXPECT_EQ(ch.m, m);
    EXPECT_EQ(ch.chunk_rows % 128, 0) << "m " << m;
    EXPECT_GE(ch.chunks, 1) << "m " << m;
    EXPECT_LE(ch.chunks, comm::kMaxChunks) << "m " << m;
    EXPECT_LT(int64_t(ch.chunks - 1) * ch.chunk_rows, m) << "m " << m << ": the last chunk is empty";
    EXPECT_GE(int64_t(ch.chunks) * ch.chunk_rows, m) << "m " << m << ": rows past the last chunk";
  }
  // As many chunks as tiles up to kMaxChunks: the first peer chunk is one tile's rows at m <= 2048.
  EXPECT_EQ(fused::agm_chunks(1000, 128).chunks, 8);
  EXPECT_EQ(fused::agm_chunks(1000, 128).chunk_rows, 128);
  EXPECT_EQ(fused::agm_chunks(4096, 128).chunk_rows, 256);
}

TEST(AgmFusedCeChunks, ATileWaitsForExactlyThePeerChunksItsRowsTouch) {
  for (int world : {2, 3, 4, 8})
    for (int64_t m : {1, 77, 128, 300, 1000, 4100}) {
      const fused::AgmChunks ch = fused::agm_chunks(m, 128);
      for (int rank = 0; rank < world; ++rank)
        for (int64_t m0 = 0; m0 < int64_t(world) * m; m0 += 128) {
          std::set<std::pair<int, int>> want;
          for (int64_t row = m0; row < std::min<int64_t>(m0 + 128, int64_t(world) * m); ++row) {
            const int q = static_cast<int>(row / m);
            if (q != rank) want.insert({q, static_cast<int>((row % m) / ch.chunk_rows)});
          }
          EXPECT_EQ(waited(ch, world, rank, m0, 128), want) << "W " << world << " m " << m << " rank " << rank << " m0 " << m0;
        }
    }
}

TEST(AgmFusedCeChunks, LandedWordsAreDistinctPerSourceAndChunk) {
  std::set<int> seen;
  for (int q = 0; q < 8; ++q)
    for (int c = 0; c < comm::kMaxChunks; ++c) EXPECT_TRUE(seen.insert(fused::agm_landed_index(q, c)).second);
  EXPECT_EQ(*seen.rbegin(), 8 * comm::kMaxChunks - 1);
}
