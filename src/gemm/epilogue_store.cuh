// Epilogue policies. An epilogue policy names the output element type and its parameters (whose
// first member is the TMA-store destination `tma_c`, see kernel_args.hpp), and may bring a
// per-tile completion hook. The staged store itself (registers -> shared memory -> TMA store) is
// gemm/epilogue_staged.cuh, the same for every policy.
//
// Hooks (all optional; called by the one elected thread of a consumer warpgroup, for the rows
// that warpgroup stores: [m_blk * BM + cwg * BM/2, +BM/2) x [n_blk * BN, +BN) of plane `split`):
//   before_store(p, m_blk, n_blk, split, cwg) before the tile's first TMA store is issued (the
//                                             warpgroup waits for it at its next barrier): where a
//                                             fused op waits for the credit that its destination
//                                             slot is free (docs/memory_ordering.md "credit", "ag-fused").
//   tile_issued(p, m_blk, n_blk, split, cwg)  right after that warpgroup's TMA stores of the tile
//                                             were committed (nothing has landed yet).
//   tile_stored(p, m_blk, n_blk, split, cwg)  once those stores are COMPLETE
//                                             (cp.async.bulk.wait_group, not .read) and
//                                             fence.proxy.async.global ran: a release by the hook
//                                             then publishes the tile (docs/memory_ordering.md
//                                             "tile-publish"). Runs at the start of the
//                                             warpgroup's next epilogue, or at kernel exit, so
//                                             the wait is off the tensor-core path.
// A policy with kHasCallHooks also has begin_call(p, words) (thread 0 of every CTA, before the
// kernel's first __syncthreads: no role waits on anything yet, so a bounded wait there can never
// strand a pipeline barrier) and end_call(p, lane, words) (producer warp 1, which the GEMM leaves
// idle), and its tile_stored takes the same per-CTA shared words (SmemLayout::kCallWordsOffset)
// as a last argument; one with kMultiDestination stores every strip of a tile to
// destinations(p, m_blk) maps, destination_map(p, m_blk, d), at row destination_row(p, m_blk, d,
// row) of that map (a fused op may route a tile to another rank's buffer, at rows of its own).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "gemm/kernel_args.hpp"

namespace weave::gemm {

// A policy that stores its tiles to its own map and nothing else: no hooks, one destination. A
// policy with its own Params derives from it (AllGatherGemm's EpilogueAgmRows).
struct EpilogueNoHooks {
  static constexpr bool kHasBeforeHook = false;
  static constexpr bool kHasStoredHook = false;
  static constexpr bool kHasIssuedHook = false;
  static constexpr bool kHasCallHooks = false;
  static constexpr bool kMultiDestination = false;
  template <class Params>
  __device__ __forceinline__ static void before_store(const Params&, int, int, int, int) {}
  template <class Params>
  __device__ __forceinline__ static void tile_issued(const Params&, int, int, int, int) {}
  template <class Params>
  __device__ __forceinline__ static void tile_stored(const Params&, int, int, int, int) {}
};

template <class Out>
struct EpilogueStoreLocal : EpilogueNoHooks {
  using Params = StoreLocalParams;
  using OutType = Out;
  static constexpr EpilogueKind kKind = EpilogueKind::kStoreLocal;
  static_assert(sizeof(Out) == 2 || sizeof(Out) == 4, "bf16 or fp32 output");
};

}  // namespace weave::gemm
