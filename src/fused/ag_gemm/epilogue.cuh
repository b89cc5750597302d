// AllGatherGemm fused-ce's GEMM policies (docs/memory_ordering.md "agm-fused-ce"):
//   EpilogueAgmRows      a plain local store (the output is this rank's), plus the producer's row
//                        wait: before a tile's first A (or A-scale) load, lane 0 of the producer
//                        warp acquire-waits (bounded, comm::wait_reached) for the landed word of
//                        every peer chunk the tile's rows touch, then fence.proxy.async.global so
//                        the TMA (async proxy) reads what the copy engine wrote after the acquire.
//                        The own rows need no wait: they were staged before the kernel.
//   AgmRotatedScheduler  the grouped tile order with the row blocks rotated to start at this
//                        rank's first row: the own rows' tiles run while the peers' chunks land.
#pragma once
#include <cstdint>

#include "comm/device_common.cuh"
#include "fused/ag_gemm/fused_ce.hpp"
#include "gemm/epilogue_store.cuh"
#include "gemm/kernel_args.hpp"
#include "gemm/tile_scheduler.cuh"
#include "hopper/ptx/fence.cuh"

namespace weave::fused {

template <class Out>
struct EpilogueAgmRows : gemm::EpilogueNoHooks {
  using Params = AgmRowsParams;
  using OutType = Out;
  static constexpr gemm::EpilogueKind kKind = gemm::EpilogueKind::kAgmRows;
  static_assert(sizeof(Out) == 2 || sizeof(Out) == 4, "bf16 or fp32 output");
  static constexpr bool kWaitsForRows = true;  // gemm/kernel.cuh calls wait_rows

  // Called by every lane of the producer warp; returns the same verdict on every lane: false when
  // a wait failed (timed out, or the op had given up), recorded in the op's error record.
  __device__ static bool wait_rows(const Params& p, int m0, int block_m, int lane) {
    int ok = 1;
    if (lane == 0 && !p.skip_landed_wait) {
      const int64_t m = p.chunks.m;
      const int w = p.p.win.world, r = p.p.win.rank;
      const int64_t end = min(static_cast<int64_t>(m0) + block_m, static_cast<int64_t>(w) * m);
      for (int64_t row = m0; row < end && ok;) {
        const int q = static_cast<int>(row / m);
        const int64_t in_q = row - q * m;
        const int c = static_cast<int>(in_q / p.chunks.chunk_rows);
        if (q != r)
          ok = comm::wait_reached(p.p, p.landed + agm_landed_index(q, c), 1u, q, 0, comm::FlagKind::kCopyLanded);
        // The next chunk (or the next source's first row).
        row = q * m + min(m, static_cast<int64_t>(c + 1) * p.chunks.chunk_rows);
      }
      ptx::fence_proxy_async_global();
    }
    return __shfl_sync(0xffffffffu, ok, 0) != 0;
  }
};

// GroupedRowsScheduler's order, every row block shifted by the row block of this rank's first row.
struct AgmRotatedScheduler {
  static constexpr gemm::SchedulerKind kKind = gemm::SchedulerKind::kRotatedRows;
  gemm::GroupedRowsScheduler grouped;
  int first_block = 0;

  __device__ __forceinline__ AgmRotatedScheduler(const gemm::KernelArgs<AgmRowsParams>& args, int block_m, int block_n)
      : grouped(args, block_m, block_n), first_block(args.epi.first_block) {}

  __device__ __forceinline__ int num_tiles() const { return grouped.num_tiles(); }

  __device__ __forceinline__ void coords(int tile, int& m_blk, int& n_blk) const {
    grouped.coords(tile, m_blk, n_blk);
    m_blk += first_block;
    if (m_blk >= grouped.num_m_blocks) m_blk -= grouped.num_m_blocks;
  }
};

}  // namespace weave::fused
