// The consumer warpgroups' view of the shared-memory ring: a stage's wgmma descriptors, its scale
// slot, the bounded waits and the release. Every main-loop policy (gemm/mainloop/) reads the ring
// only through this, so the ring layout (gemm/tile_config.cuh) and the abort protocol
// (docs/memory_ordering.md "pipeline-abort") stay in one place.
#pragma once
#include <cstdint>

#include "gemm/kernel_args.hpp"
#include "hopper/pipeline.cuh"
#include "hopper/ptx/cluster.cuh"
#include "hopper/ptx/ld_st.cuh"
#include "hopper/ptx/misc.cuh"
#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/tma.cuh"
#include "hopper/ptx/wgmma.cuh"

namespace weave::gemm {

// The debug pipeline faults a consumer role can run (MainloopArgs::debug_drop_full_wait,
// debug_early_release: the negative controls that prove the tests see a pipeline race). The clean
// role's NoFault folds every check away, so its main loop is the fault-free one; DropWaitOnly is
// for instances compiled with one consumer role (gemm/kernel.cuh single_consumer_role), whose main
// loop keeps only the dropped-wait test it always had; AnyFault is the debug role's.
struct NoFault {
  static constexpr bool drop_full_wait() { return false; }
  static constexpr bool early_release() { return false; }
};
struct DropWaitOnly {
  bool drop;
  __device__ __forceinline__ bool drop_full_wait() const { return drop; }
  static constexpr bool early_release() { return false; }
};
struct AnyFault {
  bool drop, early;
  __device__ __forceinline__ bool drop_full_wait() const { return drop; }
  __device__ __forceinline__ bool early_release() const { return early; }
};

template <class Tile, class L>
struct ConsumerRing {
  uint32_t smem_base;
  uint32_t abort_word;
  const MainloopArgs& a;
  int cwg;        // consumer warpgroup 0..1, warp-uniform (read through a shuffle by the kernel)
  int lane;
  int row_in_wg;  // this thread's accumulator-fragment row in its warpgroup's m64 slice (and +8)
  // 2-CTA clusters (Tile::kClusterM = 2): the peer CTA's shared-memory base as a shared::cluster
  // address (its barriers and abort word sit at our offsets); unused otherwise.
  uint32_t peer_base = 0;
  static constexpr bool kCluster = Tile::kClusterM > 1;

  __device__ __forceinline__ uint32_t full_bar(uint32_t s) const { return smem_base + L::kBarrierOffset + 8 * s; }
  __device__ __forceinline__ uint32_t empty_bar(uint32_t s) const {
    return smem_base + L::kBarrierOffset + 8 * L::kStages + 8 * s;
  }
  __device__ __forceinline__ uint32_t smem_a(uint32_t s) const { return smem_base + L::kAOffset + s * Tile::kATileBytes; }
  __device__ __forceinline__ uint32_t smem_b(uint32_t s) const { return smem_base + L::kBOffset + s * Tile::kBTileBytes; }
  // The stage's slot of a main-loop scale policy (gemm/scale_policy.cuh, gemm/scale_mx32.cuh).
  __device__ __forceinline__ uint32_t stage_scales(uint32_t s) const {
    return smem_base + L::kStageScaleOffset + s * L::kStageScaleBytes;
  }

  // The K step's 32 bytes are added to the descriptor's start-address field (address >> 4), which
  // cannot carry out of its 14 bits inside 227 KB: one descriptor per stage and slice, not per wgmma.
  __device__ __forceinline__ uint64_t desc_a(uint32_t s, int slice, int ks) const {
    const int row0 = Tile::wg_row0(cwg) + slice * 64;
    return ptx::wgmma_desc_k_major_sw128(smem_a(s) + row0 * 128) + static_cast<uint64_t>(2 * ks);
  }
  // B rows are 128 bytes (one swizzle row of K): a warpgroup's first column is row wg_col0 of the
  // tile, 64 rows = 8 KB, a whole number of 1 KB swizzle atoms.
  __device__ __forceinline__ uint64_t desc_b(uint32_t s, int ks) const {
    return ptx::wgmma_desc_k_major_sw128(smem_b(s) + Tile::wg_col0(cwg) * 128) + static_cast<uint64_t>(2 * ks);
  }

  // Every consumer wait goes through here. A consumer that gives up (or sees the abort word) first
  // retires what may still touch its registers or shared memory (its wgmma groups, the reads of its
  // TMA stores), then leaves; the host raises the recorded timeout (Gemm::check, the next run()).
  __device__ __forceinline__ void wait_or_leave(uint32_t bar, uint32_t parity, hopper::WaitSite site,
                                                uint32_t which) const {
    if (!hopper::mbarrier_wait_or_abort(bar, parity, site, which, a.timeout_record, a.pipeline_timeout_ns,
                                        abort_word)) {
      // A cluster's CTAs give up together and leave together (gemm/kernel.cuh "Clusters").
      if constexpr (kCluster) ptx::st_relaxed_cluster_shared_cluster_u32(peer_base + L::kAbortWordOffset, 1u);
      ptx::wgmma_wait_group_sync_aligned<0>();
      ptx::cp_async_wait_all();
      ptx::cp_async_bulk_wait_group_read<0>();
      if constexpr (kCluster) {
        ptx::barrier_cluster_arrive_release();
        ptx::barrier_cluster_wait_acquire();
      }
      ptx::thread_exit();
    }
  }
  __device__ __forceinline__ void wait_full(uint32_t s, uint32_t phase) const {
    wait_or_leave(full_bar(s), phase, hopper::WaitSite::kConsumerFull, s);
  }
  // One arrival per consumer warp: the empty barrier counts warps. In a cluster the peer's
  // producer multicasts into this stage too, so lane 1 releases it in the peer's barrier as well
  // (CTA scope: the reads it follows have completed; docs/memory_ordering.md "gemm-cluster").
  __device__ __forceinline__ void release(uint32_t s) const {
    if (lane == 0) ptx::mbarrier_arrive_release_cta(empty_bar(s));
    if constexpr (kCluster) {
      if (lane == 1) ptx::mbarrier_arrive_release_cta_shared_cluster(peer_base + (empty_bar(s) - smem_base));
    }
  }

  // A main loop's stage protocol under a fault. acquire: wait for stage s to land (unless the
  // dropped-wait fault moves the wait after the reads: acquire_late); the early-release fault then
  // releases it at once, before the wgmmas read it, so the producer may refill it under them.
  // release_after_reads: the release once every read of s is complete (skipped when early).
  // The early release then waits kEarlyReleaseReadDelayNs before the reads, so the producer's
  // refill lands first: without it, instances whose wgmmas read a stage faster than a TMA refill
  // arrives (small tiles, many stages) read the right data and the control went unnoticed
  // (12 of 32 instances on an H100, 2026-12-05).
  static constexpr uint64_t kEarlyReleaseReadDelayNs = 4000;
  template <class Fault>
  __device__ __forceinline__ void acquire(uint32_t s, uint32_t phase, const Fault& f) const {
    if (!f.drop_full_wait()) wait_full(s, phase);
    if (f.early_release()) {
      release(s);
      const uint64_t t0 = ptx::globaltimer_ns();
      while (ptx::globaltimer_ns() - t0 < kEarlyReleaseReadDelayNs) {
      }
    }
  }
  template <class Fault>
  __device__ __forceinline__ void acquire_late(uint32_t s, uint32_t phase, const Fault& f) const {
    if (f.drop_full_wait()) wait_full(s, phase);
  }
  template <class Fault>
  __device__ __forceinline__ void release_after_reads(uint32_t s, const Fault& f) const {
    if (!f.early_release()) release(s);
  }
};

// The K blocks one work item covers and where its tile sits (main loops that read per-row data).
struct MainloopTile {
  int kb_begin;
  int kb_end;
  int m0;
  int n_blk;
};

}  // namespace weave::gemm
