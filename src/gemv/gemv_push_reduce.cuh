// The decode GEMV's cluster reduction by pushing, shared by the stream path (gemv_stream_kernel.cuh)
// and the registers / TMA paths' own store epilogue (gemv_kernel.cuh): the landing barrier's start,
// the bounded wait for the peers' bytes, and the push and sum.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "gemv/gemv_params.hpp"
#include "hopper/pipeline.cuh"
#include "hopper/ptx/cluster.cuh"
#include "hopper/ptx/fence.cuh"
#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/misc.cuh"
#include "hopper/ptx/smem_size.cuh"

namespace weave::detail::gemv {

// At the kernel's start, by thread `init_thread` of every CTA (the others only arrive): the landing
// barrier expects one arrival (this one) and the peers' bytes of this CTA's rows, so its phase
// completes once every peer's partial rows landed (a cluster of one expects none).
template <int kTiles>
__device__ __forceinline__ void gemv_push_reduce_start(uint32_t land_bar_u32, int split, int my_rows, bool init_thread) {
  if (init_thread) {
    weave::ptx::mbarrier_init_shared_cta(land_bar_u32, 1);
    weave::ptx::mbarrier_arrive_expect_tx_release_cta(land_bar_u32, (split - 1) * my_rows * 8 * kTiles * 4);
    weave::ptx::fence_mbarrier_init_release_cluster();
  }
  // Peers may write into this CTA's landing region and complete its barrier only after it exists;
  // the matching wait comes after the K loop, by when every CTA has long arrived.
  weave::ptx::barrier_cluster_arrive_relaxed();
}

// The reduction's wait for the peers' partial rows: bounded by time only, never by the abort
// word, because peers write into this CTA's shared memory until the barrier's phase completes and
// the CTA must not exit before (every peer always sends, an aborted one too, and its own waits are
// bounded by kMbarrierTimeoutNs, so the bound here is a multiple of it).
__device__ __forceinline__ bool wait_landed(uint32_t bar, uint32_t rank, hopper::WaitTimeoutRecord* record) {
  if (weave::ptx::mbarrier_try_wait_parity_acquire_cluster(bar, 0)) return true;
  const uint64_t start = weave::ptx::globaltimer_ns();
  for (uint32_t spins = 1;; ++spins) {
    if (weave::ptx::mbarrier_try_wait_parity_acquire_cluster(bar, 0)) return true;
    if ((spins & 255u) == 0) {
      const uint64_t waited = weave::ptx::globaltimer_ns() - start;
      if (waited > 4 * hopper::kMbarrierTimeoutNs) {
        hopper::record_wait_timeout(record, hopper::WaitSite::kGemvLanded, rank, 0, waited);
        return false;
      }
    }
  }
}

// The landing region's floats (after its barrier's 16-byte slot).
__device__ __forceinline__ float* landing_floats(uint32_t land_bar_u32) {
  extern __shared__ __align__(128) uint8_t smem[];
  return reinterpret_cast<float*>(smem + (land_bar_u32 + 16 - weave::ptx::smem_addr(smem)));
}

// The push and the wait of gemv_push_reduce (below): true once every peer's partial rows of this
// CTA's share have landed, false if the bounded wait gave up (recorded).
template <int kTiles, int kGranule>
__device__ __forceinline__ bool gemv_push_partials(const KernelParams& p, const float (&acc)[kTiles][4],
                                                   uint32_t land_bar_u32, int rows_max, bool producer) {
  constexpr int kTokens = 8 * kTiles;
  const int rank = blockIdx.x, split = gridDim.x;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const uint32_t land_u32 = land_bar_u32 + 16;
  float* land = landing_floats(land_bar_u32);
  weave::ptx::barrier_cluster_wait_acquire();  // every CTA of the cluster initialised its landing barrier
  if (!producer) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp * kRowsPerWarp + g + 8 * h;
      const int owner = push_owner<kGranule>(r, split);
      const int row_in_owner = r - push_first_row<kGranule>(owner, split);
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        const int idx = (rank * rows_max + row_in_owner) * kTokens + 8 * i + 2 * t;
        if (owner == rank) {
          land[idx] = acc[i][2 * h];
          land[idx + 1] = acc[i][2 * h + 1];
        } else {
          weave::ptx::st_async_v2_f32_complete_tx(weave::ptx::mapa_shared_cluster(land_u32 + 4 * idx, owner),
                                                  acc[i][2 * h], acc[i][2 * h + 1],
                                                  weave::ptx::mapa_shared_cluster(land_bar_u32, owner));
        }
      }
    }
  }
  __syncthreads();  // this CTA's own slot is written
  return wait_landed(land_bar_u32, rank, p.record);
}

// The cluster reduction by pushing: each lane of the row work (`producer`: a lane without rows)
// sends its partial rows straight from its registers to the rank that owns them (st.async with
// complete_tx on the owner's landing barrier), its own rows to its own landing slot; the owner sums
// the `split` partials of each row in rank order from 0.0f, applies ptpc's two scales (`scale_smem`:
// sa[token], then sb[row of the band]) as gemv_kernel.cuh's reduced_row does, and stores them:
// every path agrees bitwise. One cluster barrier (arrived at the start, waited here: every peer's
// landing barrier exists) instead of a pull's two (H200: 2-6% off the 20-30 MB layers,
// docs/perf/gemm.md); a CTA leaves once its rows are stored, its shared memory read by nobody.
// Before it, at the kernel's start: thread 0 initialises the landing barrier (count 1) and arrives with
// expect_tx of its peers' bytes, fence.mbarrier_init.release.cluster, and every thread arrives on the
// cluster barrier relaxed (gemv_push_reduce_start).
// Memory ordering ("gemv-stream" in docs/memory_ordering.md): st.async's complete_tx releases each
// write at cluster scope; the owner's threads acquire the barrier's phase at cluster scope; its own
// slot's stores are ordered by __syncthreads.
template <ScaleMode kMode, int kTiles, int kBlockThreads>
__device__ __forceinline__ void gemv_push_reduce(const KernelParams& p, const float (&acc)[kTiles][4],
                                                 uint32_t land_bar_u32, int rows_max, int my_first, int my_rows,
                                                 bool producer, const float* scale_smem) {
  constexpr int kTokens = 8 * kTiles;
  const int split = gridDim.x, band = blockIdx.y;
  const int tid = threadIdx.x;
  float* land = landing_floats(land_bar_u32);
  if (!gemv_push_partials<kTiles, 1>(p, acc, land_bar_u32, rows_max, producer)) return;
  for (int idx = tid; idx < p.m * my_rows; idx += kBlockThreads) {
    const int tok = idx / my_rows, rl = idx % my_rows;
    const int n = band * kRowsPerCta + my_first + rl;
    if (n >= p.n) continue;
    float sum = 0.0f;
    for (int q = 0; q < split; ++q) sum += land[(q * rows_max + rl) * kTokens + tok];
    if constexpr (kMode == ScaleMode::kPtpc) sum = sum * scale_smem[tok] * scale_smem[kTokens + my_first + rl];
    if (p.out_f32) static_cast<float*>(p.c)[tok * p.ldc + n] = sum;
    else static_cast<__nv_bfloat16*>(p.c)[tok * p.ldc + n] = __float2bfloat16_rn(sum);
  }
}

}  // namespace weave::detail::gemv
