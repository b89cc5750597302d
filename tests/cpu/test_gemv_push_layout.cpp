// The stream GEMV's cluster reduction (gemv_stream_kernel.cuh, gemv_push_reduce) without a GPU: the row shares the
// kernel's own functions give each rank of a cluster, and the landing region they must fit.
//
// Catches: a row with no owner or two, an owner whose first row lies past the row (the floor
// r * split / 128 instead of the inverse of the shares: wrong from split 3 on), a share wider than
// the landing region's row stride, and a landing region too small for a cluster of 16 at 4 token
// tiles.
#include <gtest/gtest.h>

#include "gemv/gemv_params.hpp"

namespace weave::detail::gemv {
namespace {

template <int kGranule>
void expect_every_row_has_the_owner_of_its_share() {
  for (int split = 1; split <= kGemvMaxSplit; ++split) {
    int rows = 0;
    for (int q = 0; q < split; ++q) {
      const int first = push_first_row<kGranule>(q, split), end = push_first_row<kGranule>(q + 1, split);
      EXPECT_EQ(first % kGranule, 0) << "granule " << kGranule << " split " << split << " rank " << q;
      EXPECT_LE(end - first, push_rows_max<kGranule>(split)) << "split " << split << " rank " << q;
      rows += end - first;
      for (int r = first; r < end; ++r)
        EXPECT_EQ(push_owner<kGranule>(r, split), q) << "granule " << kGranule << " split " << split << " row " << r;
    }
    EXPECT_EQ(rows, kRowsPerCta) << "split " << split;
    EXPECT_EQ(push_first_row<kGranule>(split, split), kRowsPerCta);
  }
}

TEST(GemvPushLayout, EveryRowHasExactlyTheOwnerOfItsShare) {
  expect_every_row_has_the_owner_of_its_share<1>();  // the GEMV's store
  expect_every_row_has_the_owner_of_its_share<4>();  // GemmAllReduce's epilogue: whole LL units
  // The all-reduce epilogue's own unit shares (rank c: units [c 32 / split, (c + 1) 32 / split)).
  for (int split = 1; split <= kGemvMaxSplit; ++split)
    for (int c = 0; c < split; ++c) EXPECT_EQ(push_first_row<4>(c, split), 4 * (c * 32 / split));
}

// Negative control: the plain floor r * split / 128 names another owner for some row of a split
// the kernel runs, so the test above would see it.
TEST(GemvPushLayout, TheFloorOwnerIsCaught) {
  int wrong = 0;
  for (int split = 1; split <= kGemvMaxSplit; ++split)
    for (int r = 0; r < kRowsPerCta; ++r) wrong += r * split / kRowsPerCta != push_owner(r, split);
  EXPECT_GT(wrong, 0);
}

TEST(GemvPushLayout, TheLandingRegionHoldsEverySendersShare) {
  for (int tiles : {1, 2, 4})
    for (int split = 1; split <= kGemvMaxSplit; ++split) {
      const int floats = split * push_rows_max(split) * 8 * tiles;
      EXPECT_LE(16 + 4 * floats, push_landing_bytes(tiles)) << "tiles " << tiles << " split " << split;
      const int floats4 = split * push_rows_max<4>(split) * 8 * tiles;
      EXPECT_LE(16 + 4 * floats4, push_landing_bytes(tiles, 4)) << "granule 4 tiles " << tiles << " split " << split;
    }
  for (int tiles : {1, 2, 4})
    for (int stages = kMinStreamStages; stages <= kMaxStreamStages; ++stages) {
      const int land = stream_landing_offset(tiles, stages);
      EXPECT_EQ(land % 16, 0);
      // Past the ring, its 2 x S barriers and the abort word.
      EXPECT_GE(land, stages * stream_stage_bytes(tiles) + 16 * stages + 8);
      EXPECT_EQ(stream_smem_bytes(tiles, stages), land + push_landing_bytes(tiles));
    }
}

}  // namespace
}  // namespace weave::detail::gemv
