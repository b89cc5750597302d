// The decode GEMV's stream path (bf16): one producer warp keeps a deep CTA-wide TMA ring of
// weights AND activations in flight while 8 consumer warps run the tensor cores from it; no A slice
// is staged, so one CTA may take the whole K of its band (the shape of cuBLASLt's decode kernels).
//
// Work split: as gemv_kernel.cuh (grid (split, ceil(N/128)), a cluster of `split` CTAs per
// 128-row band, the same K slices of whole 64-byte steps, the same row shares and rank-order sums
// of the fp32 partials), but the partials are pushed to the rank that owns their rows
// (gemv_push_reduce: one cluster barrier, not the registers path's two around a pull). A stage holds
// two steps (a slice of an odd number of steps ends in a half stage); each lane adds its steps' MMA
// pairs in the same order as the registers path, so the two paths agree bitwise at the same split.
//
// Ring: S stages (KernelParams::stages), each [B: 2 boxes of 128 rows x 64 B | A: 2 boxes of
// 8 x tiles tokens x 64 B]; boxes are 64 bytes wide so the rows sit at a 64-byte pitch and the 8
// lanes of a shared-memory phase (rows g, g+1 x 4 chunks) read 128 distinct-bank bytes. TMA fills
// zeros past N, past K and past M (tokens the MMAs then multiply by zero), and counts whole boxes.
// Warp 8 (the producer, lane 0) issues the first KernelParams::prologue_stages stages' weight boxes
// before the PDL wait, their A boxes after it, then the rest of the first S stages, then refills a
// stage once its empty barrier says every consumer warp read it.
// A consumer warp's lane (g, t) reads the 16 bytes [16 t, +16) of rows g and g+8 of its 16 rows and
// of token g per 64-byte half stage, the fragment mapping of gemv_kernel.cuh ("Tensor-core mapping").
//
// Memory ordering ("gemv-stream" in docs/memory_ordering.md): full[s] (count 1: the producer's
// arrive.expect_tx of the stage's bytes, then TMA's complete_tx) is acquired by every consumer lane
// before it reads the stage; each consumer warp's lane 0 arrives on empty[s] (count 8, release)
// after a __syncwarp that follows all of the warp's reads; the producer acquires empty[s] before
// the TMA rewrites it (the GEMM's ring protocol, hopper/pipeline.cuh). Every wait is bounded
// (hopper::mbarrier_wait_or_abort, recorded in KernelParams::record, the CTA's abort word stops
// every role).
#pragma once
#include "gemv/gemv_kernel.cuh"
#include "gemv/gemv_push_reduce.cuh"

namespace weave::detail::gemv {

template <int kTiles>
__device__ __forceinline__ void gemv_stream_body(const KernelParams& p, const CUtensorMap& b_map,
                                                 const CUtensorMap& a_map) {
  namespace cg = cooperative_groups;
  constexpr int kTokens = 8 * kTiles;
  constexpr int kStageBytes = stream_stage_bytes(kTiles);
  constexpr int kBoxA = stream_box_a_bytes(kTiles);
  constexpr int kElemBytes = 2;  // bf16
  extern __shared__ __align__(128) uint8_t smem[];

  const int rank = blockIdx.x, split = gridDim.x, band = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int ring_stages = p.stages;
  const int64_t k0 = rank * p.k_slice_bytes;
  const int64_t k1 = min(p.k_bytes, k0 + p.k_slice_bytes);
  const int steps = k1 > k0 ? static_cast<int>((k1 - k0 + kStepBytes - 1) / kStepBytes) : 0;
  const int slice_stages = (steps + 1) / 2;  // stage loads of this CTA's K slice
  auto halves_of = [&](int j) { return min(2, steps - 2 * j); };  // 64-byte steps in stage j

  const uint32_t ring_u32 = weave::ptx::smem_addr(smem);
  const uint32_t full_u32 = ring_u32 + ring_stages * kStageBytes;
  const uint32_t empty_u32 = full_u32 + 8 * ring_stages;
  const uint32_t abort_word_u32 = empty_u32 + 8 * ring_stages;
  const bool producer = warp == kWarps;
  // The reduction: rank q owns rows [q 128 / split, (q + 1) 128 / split) of the band; its landing
  // region holds land[sender][row - first][token] for the other senders.
  const uint32_t land_bar_u32 = ring_u32 + stream_landing_offset(kTiles, ring_stages);
  const int rows_max = push_rows_max(split);
  const int my_first = push_first_row(rank, split), my_rows = push_first_row(rank + 1, split) - my_first;
  if (producer && lane == 0) {
    weave::ptx::st_volatile_shared_u32(abort_word_u32, 0u);
    weave::ptx::prefetch_tensormap(&b_map);
    weave::ptx::prefetch_tensormap(&a_map);
    for (int s = 0; s < ring_stages; ++s) {
      weave::ptx::mbarrier_init_shared_cta(full_u32 + 8 * s, 1);
      weave::ptx::mbarrier_init_shared_cta(empty_u32 + 8 * s, kWarps);
    }
    // One arrival (this one) and the peers' bytes of this CTA's rows: the phase completes once
    // every peer's partial rows landed (a cluster of one expects none).
    weave::ptx::mbarrier_init_shared_cta(land_bar_u32, 1);
    weave::ptx::mbarrier_arrive_expect_tx_release_cta(land_bar_u32, (split - 1) * my_rows * kTokens * 4);
    weave::ptx::fence_mbarrier_init_release_cluster();  // the inits are visible to the TMA unit and the peers
  }
  __syncthreads();  // the barriers and the abort word are initialised before any role waits
  // Peers may write into this CTA's landing region and complete its barrier only after it exists;
  // the matching wait comes after the K loop, by when every CTA has long arrived.
  weave::ptx::barrier_cluster_arrive_relaxed();

  const int32_t row0 = band * kRowsPerCta;
  auto k_elem = [&](int j, int half) {
    return static_cast<int32_t>((k0 + int64_t(kStreamStageK) * j + kStepBytes * half) / kElemBytes);
  };
  auto issue_b = [&](int j) {
    const uint32_t s = j % ring_stages, stage = ring_u32 + s * kStageBytes;
    weave::ptx::mbarrier_arrive_expect_tx_release_cta(full_u32 + 8 * s, halves_of(j) * (kStreamBoxB + kBoxA));
    for (int half = 0; half < halves_of(j); ++half)
      weave::ptx::cp_async_bulk_tensor_2d_global_to_shared(stage + half * kStreamBoxB, &b_map, k_elem(j, half), row0,
                                                           full_u32 + 8 * s, weave::ptx::kL2EvictFirst);
  };
  auto issue_a = [&](int j) {
    const uint32_t s = j % ring_stages, stage = ring_u32 + s * kStageBytes + 2 * kStreamBoxB;
    for (int half = 0; half < halves_of(j); ++half)
      weave::ptx::cp_async_bulk_tensor_2d_global_to_shared(stage + half * kBoxA, &a_map, k_elem(j, half), 0,
                                                           full_u32 + 8 * s, weave::ptx::kL2EvictLast);
  };

  float acc[kTiles][4];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

  if (producer) {
    // The weights of the first stages go out before the PDL wait; A (a preceding kernel may write
    // it) only after it.
    // Only KernelParams::prologue_stages of them, so that A's first boxes queue behind few weight boxes.
    const int first = min(ring_stages, slice_stages);
    const int before_wait = min(first, p.prologue_stages);
    if (lane == 0)
      for (int j = 0; j < before_wait; ++j) issue_b(j);
    ptx::griddepcontrol_wait();
    if (lane == 0) {
      for (int j = 0; j < before_wait; ++j) issue_a(j);
      for (int j = before_wait; j < first; ++j) {
        issue_b(j);
        issue_a(j);
      }
      for (int j = first; j < slice_stages; ++j) {
        const uint32_t s = j % ring_stages, parity = ((j / ring_stages) - 1) & 1;  // the previous lap's release
        if (!hopper::mbarrier_wait_or_abort(empty_u32 + 8 * s, parity, hopper::WaitSite::kProducerEmpty, s, p.record,
                                            /*bound_ns=*/0, abort_word_u32))
          break;
        issue_b(j);
        issue_a(j);
      }
    }
    __syncwarp();
    // Dependent grids may launch once every CTA has requested its last stage (the GEMM's "late"
    // trigger): a trigger at the start let the next GEMV's CTAs take the SM slots of this grid's
    // and stream beside it (H100: 28672 x 8192 at two CTAs per SM 192 against 160 us).
    ptx::griddepcontrol_launch_dependents();
  } else {
    ptx::griddepcontrol_wait();  // C is written after the reduction: the preceding grid is done by then
    const float zero4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int lane_b = (warp * kRowsPerWarp + g) * kStepBytes + 16 * t;  // row g of the warp, chunk t
    const int lane_a = g * kStepBytes + 16 * t;                          // token g, chunk t
    for (int j = 0; j < slice_stages; ++j) {
      const uint32_t s = j % ring_stages;
      // Bounded: a TMA that never lands is recorded as a "full[s]" wait; every role then stops.
      if (!hopper::mbarrier_wait_or_abort(full_u32 + 8 * s, (j / ring_stages) & 1, hopper::WaitSite::kConsumerFull, s,
                                          p.record, /*bound_ns=*/0, abort_word_u32))
        break;
      const uint8_t* stage = smem + s * kStageBytes;
      const int halves = halves_of(j);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (half >= halves) break;
        const uint8_t* piece = stage + half * kStreamBoxB + lane_b;
        const uint4 ra = *reinterpret_cast<const uint4*>(piece);
        const uint4 rb = *reinterpret_cast<const uint4*>(piece + 8 * kStepBytes);
#pragma unroll
        for (int i = 0; i < kTiles; ++i) {
          const uint4 av =
              *reinterpret_cast<const uint4*>(stage + 2 * kStreamBoxB + half * kBoxA + 8 * i * kStepBytes + lane_a);
          // A zero-based pair added with IEEE adds, as in gemv_kernel.cuh (the tensor cores' adds
          // into C truncate; the chain here is the whole K).
          float tmp[4];
          ptx::mma_m16n8k16_row_col_f32_bf16_bf16_f32(tmp, ra.x, rb.x, ra.y, rb.y, av.x, av.y, zero4);
          ptx::mma_m16n8k16_row_col_f32_bf16_bf16_f32(tmp, ra.z, rb.z, ra.w, rb.w, av.z, av.w, tmp);
          acc[i][0] += tmp[0];
          acc[i][1] += tmp[1];
          acc[i][2] += tmp[2];
          acc[i][3] += tmp[3];
        }
      }
      __syncwarp();  // every lane's reads of the stage are done before lane 0 releases it
      if (lane == 0) weave::ptx::mbarrier_arrive_release_cta(empty_u32 + 8 * s);
    }
  }

  gemv_push_reduce<ScaleMode::kBF16, kTiles, kStreamThreads>(p, acc, land_bar_u32, rows_max, my_first, my_rows,
                                                              producer, nullptr);
}

template <int kTiles>
__global__ void __launch_bounds__(kStreamThreads, 2)
    gemv_stream_kernel(const KernelParams p, const __grid_constant__ CUtensorMap b_map,
                       const __grid_constant__ CUtensorMap a_map) {
  gemv_stream_body<kTiles>(p, b_map, a_map);
}

}  // namespace weave::detail::gemv
