// The persistent static schedule every GEMM kernel instance walks (gemm/kernel.cuh, producer and
// consumers alike), host- and device-callable so the CPU schedule simulations
// (tests/cpu/test_fused_ar_plan.cpp) step their CTAs with the kernel's own functions, not a copy:
//
//   CTA b of a grid of G takes work items b, b + G, b + 2G, ... while the item is < num_items:
//   its k-th item is persistent_item(b, k, G) = b + k * G. Its last item is the one whose next
//   is past the end (the CTA retires its stores there: StagedEpilogue::finish).
//
//   items:   0   1   2   3   4   5   6   7   8   9        (G = 4, num_items = 10)
//   CTA:     0   1   2   3   0   1   2   3   0   1        CTAs 0, 1 take 3 items; 2, 3 take 2
//
// The kernel steps with persistent_first_item / persistent_next_item (an add per item, as before
// this header existed: the instances' SASS is unchanged); persistent_item is the closed form the
// CPU tests hold the stepping to.
#pragma once

#if defined(__CUDACC__)
#define WEAVE_WALK_HD __host__ __device__ __forceinline__
#else
#define WEAVE_WALK_HD inline
#endif

namespace weave::gemm {

// The first item of CTA `cta` (blockIdx.x).
WEAVE_WALK_HD constexpr int persistent_first_item(int cta) { return cta; }

// The item after `item` of the same CTA, in a grid of `grid` CTAs (gridDim.x).
WEAVE_WALK_HD constexpr int persistent_next_item(int item, int grid) { return item + grid; }

// Whether `item` is its CTA's last of `num_items` (its next is past the end).
WEAVE_WALK_HD constexpr bool persistent_last_item(int item, int grid, int num_items) {
  return persistent_next_item(item, grid) >= num_items;
}

// The closed form: the k-th item (k = 0, 1, ...) of CTA `cta`.
WEAVE_WALK_HD constexpr int persistent_item(int cta, int k, int grid) { return cta + k * grid; }

// How many items CTA `cta` takes (0 when cta >= num_items).
WEAVE_WALK_HD constexpr int persistent_items_of(int cta, int grid, int num_items) {
  return cta < num_items ? (num_items - cta + grid - 1) / grid : 0;
}

// 2-CTA clusters along M (TileShape::kClusterM = 2; gemm/kernel.cuh "Clusters"): the grouped tile
// order (gemm/tile_scheduler.cuh) runs over the row blocks rounded up to an even count, in groups of
// an even number of rows (this function applied to both), so its tiles 2j and 2j + 1 are row
// blocks 2i and 2i + 1 of one column. With an even grid, cluster c's two CTAs (2c, 2c + 1) take
// items 2c + kG and 2c + 1 + kG: always such a pair, and the same number of items each (the
// item count, tiles x K splits, is even). Where the real row count is odd, the last row block
// of each column is a ghost: its CTA loads and multiplies rows past M (zeros) for the pair's B
// and stores nothing (the TMA clips every row).
WEAVE_WALK_HD constexpr int cluster_pair_rows(int rows) { return rows + (rows & 1); }

// The grouped tile order's tile -> (row block, column block) (GroupedRowsScheduler::coords, which
// calls this; picture in gemm/tile_scheduler.cuh): groups of `group_rows` row blocks, each walked
// down its rows first, then along N.
WEAVE_WALK_HD constexpr void grouped_tile_coords(int tile, int num_m_blocks, int num_n_blocks, int group_rows,
                                                 int& m_blk, int& n_blk) {
  const int per_group = group_rows * num_n_blocks;
  const int group = tile / per_group;
  const int first_m = group * group_rows;
  const int left = num_m_blocks - first_m;
  const int rows = group_rows < left ? group_rows : left;
  const int in_group = tile - group * per_group;
  m_blk = first_m + in_group % rows;
  n_blk = in_group / rows;
}

}  // namespace weave::gemm

#undef WEAVE_WALK_HD
