// Tile schedulers: the order in which a persistent CTA walks the output tiles. A policy type, so a
// fused schedule can bring another order (e.g. one destination rank's row band at a time)
// without touching the main loop. Producer and consumers of a CTA walk the same sequence.
#pragma once
#include <cstdint>

#include "gemm/kernel_args.hpp"
#include "gemm/persistent_walk.hpp"

namespace weave::gemm {

// Grouped order for L2 reuse: tiles are taken in groups of `group_rows` row-blocks; inside a group
// the walk goes down the rows first, then along N. The CTAs running at one time then touch
// ~group_rows A panels and ~grid/group_rows B panels, which stay in L2 while they are reused.
//
//   n ->   0  1  2  3 ...
//   m 0    0  4  8 12        (kGroupRows = 4)
//     1    1  5  9 13
//     2    2  6 10 14
//     3    3  7 11 15
//     4   16 ...             next group
// (group_rows = 4 in the picture; the planner's value is GemmPlan::group_rows.)
// Built from the kernel's full arguments (a fused op's scheduler also reads its epilogue's
// parameters: rank, world size, chunk layout).
struct GroupedRowsScheduler {
  static constexpr SchedulerKind kKind = SchedulerKind::kGroupedRows;
  int num_m_blocks = 0;
  int num_n_blocks = 0;
  int group_rows = 1;

  template <class EpilogueParams>
  __device__ __forceinline__ GroupedRowsScheduler(const KernelArgs<EpilogueParams>& args, int block_m, int block_n)
      : num_m_blocks((args.main.m + block_m - 1) / block_m),
        num_n_blocks((args.main.n + block_n - 1) / block_n),
        group_rows(args.main.group_rows > 0 ? args.main.group_rows : 1) {}

  __device__ __forceinline__ int num_tiles() const { return num_m_blocks * num_n_blocks; }

  __device__ __forceinline__ void coords(int tile, int& m_blk, int& n_blk) const {
    grouped_tile_coords(tile, num_m_blocks, num_n_blocks, group_rows, m_blk, n_blk);
  }

  // A 2-CTA cluster's order (gemm/persistent_walk.hpp cluster_pair_rows): rows and groups rounded
  // up to even counts, so the cluster's CTAs take tiles 2j, 2j + 1 of one column.
  __device__ __forceinline__ void pair_rows() {
    num_m_blocks = cluster_pair_rows(num_m_blocks);
    group_rows = cluster_pair_rows(group_rows);
  }
};

}  // namespace weave::gemm
