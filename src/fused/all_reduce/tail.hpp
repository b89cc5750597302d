// fused-rs's second kernel (GemmAllReduce mode fused-rs, the MORI structure kept as a control arm):
// after the GEMM kernel scattered every tile as a bf16 partial into its owner's staging (own band
// included, fused/all_reduce/epilogue.cuh scatter_only), the tail reduces this rank's band and gathers it:
//
//   per row of the own band (CTA b takes rows b, b + G, ...), before the first row of chunk c:
//     acquire-wait flag[phase 0][q][c] >= e for every source q (bounded; own included), then
//     __syncthreads (docs/memory_ordering.md "consume-acquire");
//   each thread sums 8 columns in rank order, v = t_0 + t_1 + ... in fp32 from the bf16 partials
//     (exactly split-lsa's two-shot sum, so fused-rs == split-lsa bitwise), and stores the bf16
//     result to this rank's output and every peer's (rank-rotated; after an abort, own only);
//   __syncthreads, then thread 0 counts the row on AG[c] (chunk-election; rows of the chunk are
//     the units) and the elected count publishes flag[phase 1][rank][c] = e at every peer;
//   the CTA with the last ticket waits for every peer's phase-1 flags of every chunk of its band
//     (bounded), then stores the epoch (the call ends here, not in the GEMM kernel).
// The epoch is e = last completed + 1 (the GEMM kernel of the same call did not close it). No
// credit: as for fused, a rank starts call e + 1 only after every owner's finals of call e arrived,
// which that owner sent after reading its staging (docs/memory_ordering.md "ar-fused").
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "comm/kernels.hpp"
#include "fused/all_reduce/schedule.hpp"

namespace weave::fused {

struct ArTailParams {
  comm::Proto p;
  ArSchedule sched;          // the call's bands and chunks (rank 0's walk; only the geometry is read)
  uint64_t staging = 0;      // gar.staging: [src][band rows][n] bf16
  uint64_t slot_stride = 0;  // bytes of one source's slot
  uint64_t out = 0;          // gar.out: [m_max][n] bf16
  int32_t m = 0, n = 0, block_m = 128;
  int32_t skip_partial_wait = 0;  // testing: reduce without waiting for the partials
  int32_t skip_arrival_wait = 0;  // testing: end without waiting for the peers' finals
};

// CTAs for the tail of m rows: one per row of the own band at most, at most `cap` (co-resident
// with the peers' tails where ranks share a GPU).
int ar_tail_grid(const ArSchedule& s, int rank, int64_t m, int block_m, int cap);
void launch_ar_tail(const ArTailParams& p, int grid, cudaStream_t stream);

}  // namespace weave::fused
