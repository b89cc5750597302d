// The decode GEMV kernel: C[M,N] = A[M,K] * B[N,K]^T for M <= 32, memory-bound on B.
//
// Work split
//   grid (split, ceil(N/128)), cluster (split, 1, 1). CTA (rank r, band) owns B rows
//   [128 band, 128 band + 128) and the K bytes [r k_slice, (r+1) k_slice). Warp w of the CTA owns
//   16 of those rows. After the K loop the `split` CTAs of a cluster sum their fp32 partial tiles
//   through distributed shared memory in rank order (deterministic, no atomics, no workspace);
//   rank r reduces and stores rows [r 128/split, (r+1) 128/split) of the band.
//
//          K ->   rank 0      rank 1      ...  rank split-1
//   band 0      [CTA 0,0]   [CTA 1,0]          [CTA s-1,0]   <- one cluster, one 128-row band
//   band 1      [CTA 0,1]   ...
//
// Weight stream
//   A warp step covers 16 rows x 64 K bytes: lane (g = lane/4, t = lane%4) uses the 16 bytes
//   [64 s + 16 t, +16) of rows g and g+8. Two ways to bring them in (WeightPath):
//   registers: each lane loads its 16-byte pieces itself (ld.global.nc, no L1 allocation);
//     kInFlight steps (4 or 8, see in_flight_steps) are in flight per warp at all times, a rolling
//     register buffer refilled with the step kInFlight ahead as soon as it has been used.
//   tma: lane 0 of each warp keeps a ring of S slots of q steps of its 16 rows in flight through
//     TMA (one [16 rows, 64 B] box per step, a slot's q boxes requested together under one
//     mbarrier, OOB rows and K zero-filled); lanes read their pieces from the slot (rows at a
//     64-byte pitch: the 8 lanes of a shared-memory phase cover 128 distinct-bank bytes). The
//     default ring, 8 slots of 1 step, keeps 8 KB per warp (128 KB per SM) in flight instead of
//     the registers' 32-64 KB, without spending registers on it; longer slots request longer runs
//     of each row at once (KernelParams ring_*: a diagnostic, WEAVE_GEMV_PATH=tma:QxS).
//   Either way the first steps are requested before the PDL wait and before A is staged.
//   Ring memory ordering: a slot's full barrier (expect_tx by lane 0, complete_tx by TMA) is
//   acquired by every lane before it reads; the refill is issued by lane 0 after every lane's
//   fence.proxy.async.shared::cta and a __syncwarp, so the TMA (async proxy) write cannot overtake
//   a lane's generic read of the slot (a write after read across proxies; the GEMM's ring orders
//   the same through an empty barrier across warps).
//
// Tensor-core mapping ("swap AB")
//   mma.sync m16n8 with B's 16 rows as the row operand and up to 8 tokens of A as the column
//   operand. The order of K inside a step is free as long as both operands use the same one: the
//   16 loaded bytes of a lane (registers x y z w) feed the row fragment {a0..a3} = {row g x,
//   row g+8 x, row g y, row g+8 y} of the first MMA and {.. z .., .. w ..} of the second, and the
//   lane's column fragment is then exactly the same 16 bytes of token g: one 16-byte shared-memory
//   load per token tile (bf16: two k16 MMAs, e4m3: two k32 MMAs per step).
//   mxfp8 needs each k32 MMA to hold one 32-wide scale group, but a lane's 16 bytes are half a
//   group: lanes t and t^2 swap their upper 8 bytes (two shuffles per row), so lane t holds 8
//   bytes of each of the step's two groups, and A is staged in the matching permuted order.
//   Every mode runs a step's MMA pair from a zero C and adds the result to fp32 accumulators with
//   IEEE adds: MMAs accumulating in place truncate toward the accumulator's exponent, a bias that
//   grows with the chain (docs/perf/gemm.md, twenty-seventh session).
//
// Scales (raw layouts, staged per CTA in shared memory)
//   ptpc: fp32 per row of A and of B, applied once after the reduction (the e4m3 MMA pairs are
//     still summed into fp32 registers per step, see the K loop).
//   blockscale: one 128-wide K block per step pair; each step's MMA pair goes into a temporary
//     that is promoted as acc += tmp * sa[m][kb] * sb[band][kb].
//   mxfp8: each k32 MMA (one group) is promoted as acc += tmp * (2^(ea-127) * 2^(eb-127)), the
//     two powers of two formed exactly in fp32 (ea = 0 is the subnormal 2^-127) and multiplied
//     first, so the factor is exact whenever 2^(ea+eb-254) lies in fp32's range, whatever either
//     scale alone is (tested at ue8m0 0 and 254). Outside it: above 2^127 the factor is inf (a
//     group's contribution is then inf, or NaN for an all-zero group, although its exact value
//     may still be finite when the group's partial sum is below 1); below 2^-149 it is 0 (the
//     exact contribution is below 2^-126). 0xFF (NaN) propagates.
#pragma once
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "common/ue8m0.cuh"
#include "gemv/gemv_params.hpp"
#include "gemv/gemv_push_reduce.cuh"
#include "hopper/pipeline.cuh"
#include "hopper/ptx/fence.cuh"
#include "hopper/ptx/sync_mma_ld.cuh"
#include "hopper/ptx/tma.cuh"

namespace weave::detail::gemv {

// Warp steps whose loads are in flight: 8 (16 x 16 B per lane) for e4m3 with one token tile,
// else 4; both keep the kernel at <= 128 registers (2 CTAs per SM). Measured on H200
// (test_gemv_bandwidth): 8 made bf16 at M <= 8 slower (8192x1280: 9.5 -> 11.1 us at the best
// split), so bf16 keeps 4; the planner's splits are calibrated for these depths.
__host__ __device__ constexpr int in_flight_steps(ScaleMode mode, int tiles) {
  return mode != ScaleMode::kBF16 && tiles == 1 ? 8 : 4;
}
// The registers path's depth of an instance: kDepth where one is forced (0: in_flight_steps).
// Forced depths exist for one token tile only (GemvConfig::depth, a diagnostic).
__host__ __device__ constexpr int register_depth(ScaleMode mode, int tiles, int depth) {
  return depth != 0 ? depth : in_flight_steps(mode, tiles);
}

// Loads `count` values (load(idx) -> float) and stores them (store(idx, v)), kBatch loads per
// thread issued before any of their stores, so a batch costs one memory round trip.
template <typename Load, typename Store>
__device__ __forceinline__ void stage_batched(int count, Load load, Store store) {
  constexpr int kBatch = 4;
  for (int base = threadIdx.x; base < count; base += kBatch * kThreads) {
    float v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) v[j] = base + j * kThreads < count ? load(base + j * kThreads) : 0.0f;
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (base + j * kThreads < count) store(base + j * kThreads, v[j]);
  }
}

// One CTA's view of its band after the K loop: the cluster's fp32 partial tiles [kTokens, 128 rows]
// (in distributed shared memory) and the staged scales.
struct GemvBand {
  float* part;
  const float* scale_smem;
  int rank, split, band;
  // The pushed reduction's landing region (gemv_push_reduce.cuh) instead of `part`: the cluster's
  // partials of this CTA's rows [first, first + its share), landed[q][row - first][token].
  const float* landed = nullptr;
  int rows_max = 0, first = 0;
};

// Row rl of the band for token tok: the cluster's partials summed in rank order (deterministic),
// ptpc's two scales applied. Every epilogue rounds this value, so all of them agree bitwise.
template <ScaleMode kMode, int kTokens>
__device__ __forceinline__ float reduced_row(cooperative_groups::cluster_group& cluster, const GemvBand& b, int tok, int rl) {
  float sum = 0.0f;
  for (int q = 0; q < b.split; ++q) sum += cluster.map_shared_rank(b.part, q)[tok * kPartStride + rl];
  if constexpr (kMode == ScaleMode::kPtpc) sum = sum * b.scale_smem[tok] * b.scale_smem[kTokens + rl];
  return sum;
}

// reduced_row from the pushed reduction's landing region (row rl of the band, one of this CTA's).
template <ScaleMode kMode, int kTokens>
__device__ __forceinline__ float landed_row(const GemvBand& b, int tok, int rl) {
  float sum = 0.0f;
  for (int q = 0; q < b.split; ++q) sum += b.landed[(q * b.rows_max + rl - b.first) * kTokens + tok];
  if constexpr (kMode == ScaleMode::kPtpc) sum = sum * b.scale_smem[tok] * b.scale_smem[kTokens + rl];
  return sum;
}

// The GEMV's own epilogue: each CTA of the cluster stores its share of the band's rows into C.
// The hooks an epilogue supplies (GemmAllReduce's decode-fused one: gemv/gemv_all_reduce.cuh):
//   after_wait()  every thread, right after griddepcontrol.wait (before A is staged)
//   reduce()      every thread, while the cluster's partial tiles are readable (between the two
//                 cluster barriers), or once its rows' partials have landed (the pushed reduction)
//   finish()      every thread, after the last cluster barrier or after reduce() (this CTA's shared
//                 memory only)
//   skips_push(r) whether cluster rank r withholds its pushed partials (a testing hook)
struct GemvStoreEpilogue {
  static constexpr int kRowGranule = 1;  // its CTAs' row shares (gemv_params.hpp push_first_row)
  __device__ __forceinline__ void after_wait() {}
  // Whether cluster rank `rank` withholds its pushed partials (a negative control's; never here).
  static constexpr bool skips_push(int) { return false; }
  template <ScaleMode kMode, int kTokens>
  __device__ __forceinline__ void reduce(const KernelParams& p, cooperative_groups::cluster_group& cluster,
                                         const GemvBand& b) {
    // Any split (a cluster of 3 CTAs is as valid as one of 4): rank r reduces rows
    // [r 128 / split, (r + 1) 128 / split) of the band.
    const int r_begin = b.rank * kRowsPerCta / b.split;
    const int rows_per_rank = (b.rank + 1) * kRowsPerCta / b.split - r_begin;
    for (int idx = threadIdx.x; idx < p.m * rows_per_rank; idx += kThreads) {
      const int tok = idx / rows_per_rank, rl = r_begin + idx % rows_per_rank;
      const int n = b.band * kRowsPerCta + rl;
      if (n >= p.n) continue;
      const float sum = reduced_row<kMode, kTokens>(cluster, b, tok, rl);
      if (p.out_f32) static_cast<float*>(p.c)[tok * p.ldc + n] = sum;
      else static_cast<__nv_bfloat16*>(p.c)[tok * p.ldc + n] = __float2bfloat16_rn(sum);
    }
  }
  __device__ __forceinline__ void finish(const KernelParams&, const GemvBand&) {}
};

template <ScaleMode kMode, int kTiles, WeightPath kPath, int kDepth, typename Epilogue>
__device__ __forceinline__ void gemv_body(const KernelParams& p, const CUtensorMap& b_map, Epilogue& epi) {
  namespace cg = cooperative_groups;
  constexpr int kTokens = 8 * kTiles;
  constexpr bool kMx = kMode == ScaleMode::kMxfp8;
  constexpr bool kBlock = kMode == ScaleMode::kBlockscale;
  constexpr bool kBf16 = kMode == ScaleMode::kBF16;
  constexpr bool kTma = kPath == WeightPath::kTma;
  constexpr int kInFlight = kTma ? 1 : register_depth(kMode, kTiles, kDepth);  // register buffer depth
  constexpr int kElemBytes = kBf16 ? 2 : 1;
  extern __shared__ __align__(128) uint8_t smem[];

  const int rank = blockIdx.x;  // cluster rank along K (cluster dims (split, 1, 1))
  const int split = gridDim.x;
  const int band = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;

  const int64_t k0 = rank * p.k_slice_bytes;
  const int64_t k1 = min(p.k_bytes, k0 + p.k_slice_bytes);
  const int steps = k1 > k0 ? static_cast<int>((k1 - k0 + kStepBytes - 1) / kStepBytes) : 0;
  // At one token tile the cluster reduction is pushed (gemv_push_reduce.cuh, landing at the end of the
  // dynamic shared memory, shares of the epilogue's row granule); wider tiles pull (below).
  constexpr bool kPush = pushes_reduction(kPath, kTiles);
  constexpr int kGranule = Epilogue::kRowGranule;
  const uint32_t land_bar_u32 =
      weave::ptx::smem_addr(smem) + weave::ptx::dynamic_smem_size() - push_landing_bytes(kTiles, kGranule);
  const int rows_max = push_rows_max<kGranule>(split);
  const int my_first = push_first_row<kGranule>(rank, split);
  const int my_rows = push_first_row<kGranule>(rank + 1, split) - my_first;

  // --- weight stream: prologue loads, issued before anything else (and before the PDL wait) ---
  const int row_a = band * kRowsPerCta + warp * kRowsPerWarp + g;  // rows g and g + 8 of the warp
  const int row_b = row_a + 8;
  const bool ok_a = row_a < p.n, ok_b = row_b < p.n;
  const uint8_t* src_a = p.b + (ok_a ? row_a : 0) * p.ldb_bytes + k0 + 16 * t;
  const uint8_t* src_b = p.b + (ok_b ? row_b : 0) * p.ldb_bytes + k0 + 16 * t;
  const int64_t lane_k = k0 + 16 * t;  // byte of K of this lane's chunk in step 0
  uint4 buf_a[kInFlight], buf_b[kInFlight];
  // TMA ring of this warp: 2^slots_log2 slots of 2^steps_log2 [16 rows, 64 B] boxes (consecutive
  // steps, requested together), then the slots' full barriers. Slot sequence j holds steps
  // [j q, j q + q) and lives in slot j mod S; its wait parity is (j / S) mod 2.
  const int q_log2 = p.ring_steps_log2, slots_log2 = p.ring_slots_log2;
  const int slot_bytes = kTmaBoxBytes << q_log2;
  uint8_t* const ring = smem + p.ring_offset + (warp << slots_log2) * slot_bytes;
  const uint32_t ring_u32 = weave::ptx::smem_addr(ring);
  const uint32_t bars_base_u32 = weave::ptx::smem_addr(smem + p.ring_offset + (kWarps << slots_log2) * slot_bytes);
  const uint32_t bars_u32 = bars_base_u32 + (warp << slots_log2) * 8;
  // The CTA's abort word (after every warp's barriers): a warp whose ring wait timed out sets it,
  // and the other warps' waits then stop too (hopper::mbarrier_wait_or_abort).
  const uint32_t abort_word_u32 = bars_base_u32 + (kWarps << slots_log2) * 8;
  const int32_t warp_row0 = band * kRowsPerCta + warp * kRowsPerWarp;
  auto issue_slot = [&](int j) {  // lane 0: slot sequence j <- its steps of the warp's 16 rows
    const uint32_t slot = j & ((1 << slots_log2) - 1);
    const int first = j << q_log2, count = min(1 << q_log2, steps - first);
    weave::ptx::mbarrier_arrive_expect_tx_release_cta(bars_u32 + 8 * slot, count * kTmaBoxBytes);
    for (int i = 0; i < count; ++i)
      weave::ptx::cp_async_bulk_tensor_2d_global_to_shared(
          ring_u32 + slot * slot_bytes + i * kTmaBoxBytes, &b_map,
          static_cast<int32_t>((k0 + int64_t(kStepBytes) * (first + i)) / kElemBytes), warp_row0, bars_u32 + 8 * slot,
          weave::ptx::kL2EvictFirst);
  };
  if constexpr (kTma) {
    if (tid == 0) weave::ptx::st_volatile_shared_u32(abort_word_u32, 0u);  // read after the staging barrier
    if (lane == 0) {
      weave::ptx::prefetch_tensormap(&b_map);
      for (int u = 0; u < (1 << slots_log2); ++u) weave::ptx::mbarrier_init_shared_cta(bars_u32 + 8 * u, 1);
      weave::ptx::fence_mbarrier_init_release_cluster();  // the inits are visible to the TMA unit
      for (int j = 0; j < (1 << slots_log2) && (j << q_log2) < steps; ++j) issue_slot(j);
    }
    __syncwarp();
  } else {
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const bool in_k = u < steps && lane_k + kStepBytes * u < k1;
      buf_a[u] = ptx::ld_global_nc_na_l2_256b_v4_pred(src_a + kStepBytes * u, in_k && ok_a);
      buf_b[u] = ptx::ld_global_nc_na_l2_256b_v4_pred(src_b + kStepBytes * u, in_k && ok_b);
    }
  }

  if constexpr (kPush) gemv_push_reduce_start<kTiles>(land_bar_u32, split, my_rows, tid == 0);

  // Dependent grids may be scheduled now; A, the scales and C are touched only after the wait.
  ptx::griddepcontrol_launch_dependents();
  ptx::griddepcontrol_wait();
  epi.after_wait();

  // --- stage A [M, steps x 64 B] (zero past k1) and the scales of this K slice ---
  // A goes through cp.async (nothing waits on it until the barrier); the scale loads are issued
  // in batches before any of their shared-memory stores, so the whole staging costs about one
  // round trip to L2, overlapping the weight loads already in flight.
  uint8_t* a_smem = smem;
  float* scale_smem = reinterpret_cast<float*>(smem + p.region0_bytes);
  {
    const uint32_t a_smem_u32 = static_cast<uint32_t>(__cvta_generic_to_shared(a_smem));
    // Only the M real token rows are staged; the MMAs take zeros for the others (K loop).
    const int chunks_per_row = steps * 4;
    for (int idx = tid; idx < p.m * chunks_per_row; idx += kThreads) {
      const int r = idx / chunks_per_row, c = idx % chunks_per_row;
      const uint8_t* row = p.a + r * p.lda_bytes + k0;
      const uint32_t dst = a_smem_u32 + r * p.a_stride + 16 * c;
      if constexpr (!kMx) {
        const bool ok = r < p.m && k0 + 16 * c < k1;
        ptx::cp_async_cg_shared_global_16(dst, ok ? row + 16 * c : p.a, ok ? 16 : 0);
      } else {
        // Lane t's 16 bytes: [its 8 bytes of the window's group 0 | its 8 of group 1], the
        // order the B registers have after the shuffle (see the header comment).
        const int w = c / 4, tt = c % 4;
        const int own = kStepBytes * w + 16 * tt;               // lane's own lower 8 bytes
        const int other = kStepBytes * w + 16 * (tt ^ 2) + 8;  // partner's upper 8 bytes
        const int lo = tt < 2 ? own : other, hi = tt < 2 ? other : own;
        const bool ok_lo = r < p.m && k0 + lo < k1, ok_hi = r < p.m && k0 + hi < k1;
        ptx::cp_async_ca_shared_global_8(dst, ok_lo ? row + lo : p.a, ok_lo ? 8 : 0);
        ptx::cp_async_ca_shared_global_8(dst + 8, ok_hi ? row + hi : p.a, ok_hi ? 8 : 0);
      }
    }
    if constexpr (kMode == ScaleMode::kPtpc) {
      // sa[token] then sb[row of the band]: the epilogue's factors.
      const float* sa = static_cast<const float*>(p.scale_a);
      const float* sb = static_cast<const float*>(p.scale_b);
      stage_batched(kTokens + kRowsPerCta, [&](int idx) {
        if (idx < kTokens) return idx < p.m ? sa[idx] : 0.0f;
        const int n = band * kRowsPerCta + idx - kTokens;
        return n < p.n ? sb[n] : 0.0f;
      }, [&](int idx, float v) { scale_smem[idx] = v; });
    } else if constexpr (kBlock) {
      // fac[kb_local][token] = sa[m][kb] * sb[band][kb] over the 128-blocks this slice touches.
      const int64_t kblocks = p.k / 128;
      const int64_t kb_first = k0 / 128;
      const int64_t kb_end = steps > 0 ? (k1 + 127) / 128 : kb_first;
      const float* sa = static_cast<const float*>(p.scale_a);
      const float* sb = static_cast<const float*>(p.scale_b) + band * kblocks;
      stage_batched(p.scale_groups * kTokens, [&](int idx) {
        const int kbl = idx / kTokens, r = idx % kTokens;
        const int64_t kb = kb_first + kbl;
        return (r < p.m && kb < kb_end) ? sa[r * p.sa_row_stride + kb * p.sa_k_stride] * sb[kb] : 0.0f;
      }, [&](int idx, float v) { scale_smem[idx] = v; });
    } else if constexpr (kMx) {
      // fa[group_local][token] = 2^(ea-127), then fb[block32 of the CTA][group_local] = 2^(eb-127).
      const int64_t groups = p.k / 32;
      const int64_t g_first = k0 / 32;
      const int g_count = 2 * steps;  // groups of this slice (the last may lie past K: zero)
      const uint8_t* sa = static_cast<const uint8_t*>(p.scale_a);
      const uint8_t* sb = static_cast<const uint8_t*>(p.scale_b);
      const int64_t b_rows = (p.n + 31) / 32;
      const int fa_count = g_count * kTokens;
      float* fb = scale_smem + p.scale_groups * kTokens;
      stage_batched(fa_count + 4 * g_count, [&](int idx) {
        if (idx < fa_count) {
          const int gl = idx / kTokens, r = idx % kTokens;
          const int64_t gg = g_first + gl;
          return (r < p.m && gg < groups) ? ue8m0_to_f32(sa[r * groups + gg]) : 0.0f;
        }
        const int j = (idx - fa_count) / g_count, gl = (idx - fa_count) % g_count;
        const int64_t gg = g_first + gl, nb = int64_t(band) * 4 + j;
        return (nb < b_rows && gg < groups) ? ue8m0_to_f32(sb[nb * groups + gg]) : 0.0f;
      }, [&](int idx, float v) {
        if (idx < fa_count) scale_smem[idx] = v;  // idx = gl * kTokens + r
        else fb[((idx - fa_count) / g_count) * p.scale_groups + (idx - fa_count) % g_count] = v;
      });
    }
    ptx::cp_async_wait_all();
  }
  __syncthreads();

  // --- K loop ---
  float acc[kTiles][4];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  const uint8_t* a_lane = a_smem + g * p.a_stride + 16 * t;
  // Token 8 i + g of this lane's column fragment is a real row of A (staged), else zero.
  auto a_fragment = [&](int i, int s) {
    return 8 * i + g < p.m ? *reinterpret_cast<const uint4*>(a_lane + 8 * i * p.a_stride + kStepBytes * s)
                           : make_uint4(0u, 0u, 0u, 0u);
  };
  const float* fb_warp = scale_smem + p.scale_groups * kTokens + (warp / 2) * p.scale_groups;
  const float zero4[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // the C operand of promoted MMAs

  auto mma = [](float(&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                uint32_t b1, const float(&c)[4]) {
    if constexpr (kBf16) ptx::mma_m16n8k16_row_col_f32_bf16_bf16_f32(d, a0, a1, a2, a3, b0, b1, c);
    else ptx::mma_m16n8k32_row_col_f32_e4m3_e4m3_f32(d, a0, a1, a2, a3, b0, b1, c);
  };

  bool streaming = true;  // false once a TMA wait timed out (recorded): the warp stops
  for (int s0 = 0; s0 < steps && streaming; s0 += kInFlight) {
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int s = s0 + u;
      if (s < steps) {
        uint4 ra, rb;
        if constexpr (kTma) {
          const int j = s >> q_log2, within = s & ((1 << q_log2) - 1);
          const uint32_t slot = j & ((1 << slots_log2) - 1);
          // Bounded: a TMA that never lands is recorded as a "full[slot]" wait in p.record, which
          // weave::Gemm's check() reports, and every warp of the CTA stops streaming.
          if (within == 0 && !hopper::mbarrier_wait_or_abort(bars_u32 + 8 * slot, (j >> slots_log2) & 1,
                                                             hopper::WaitSite::kConsumerFull, slot, p.record,
                                                             /*bound_ns=*/0, abort_word_u32)) {
            streaming = false;
            break;
          }
          const uint8_t* piece = ring + slot * slot_bytes + within * kTmaBoxBytes + g * kStepBytes + 16 * t;
          ra = *reinterpret_cast<const uint4*>(piece);
          rb = *reinterpret_cast<const uint4*>(piece + 8 * kStepBytes);
        } else {
          ra = buf_a[u], rb = buf_b[u];
        }

        if constexpr (!kMx) {
          // blockscale: the step's 128-wide K block (a step never straddles one)
          const int kbl = kBlock ? static_cast<int>((k0 + int64_t(kStepBytes) * s) / 128 - k0 / 128) : 0;
#pragma unroll
          for (int i = 0; i < kTiles; ++i) {
            const uint4 av = a_fragment(i, s);
            if constexpr (kBf16) {
              // The step's 32 products per row go through a zero-based temporary too, added to
              // the fp32 accumulators with IEEE adds: a K-long chain of MMAs accumulating in
              // place drifted past fp32's bound at split 1 over K = 7168 (the tensor cores' adds
              // into C are not IEEE-rounded; measured on H100, docs/perf/gemm.md).
              float tmp[4];
              mma(tmp, ra.x, rb.x, ra.y, rb.y, av.x, av.y, zero4);
              mma(tmp, ra.z, rb.z, ra.w, rb.w, av.z, av.w, tmp);
              acc[i][0] += tmp[0];
              acc[i][1] += tmp[1];
              acc[i][2] += tmp[2];
              acc[i][3] += tmp[3];
            } else {
              // e4m3: the step's 64 products go through a zero-based temporary and are added to
              // the fp32 accumulators here, because Hopper's fp8 MMA adds into its C operand with
              // reduced precision (DeepSeek-V3 report, sec. 3.3.2): a K-long chain would lose bits.
              float tmp[4];
              mma(tmp, ra.x, rb.x, ra.y, rb.y, av.x, av.y, zero4);
              mma(tmp, ra.z, rb.z, ra.w, rb.w, av.z, av.w, tmp);
              float2 fac = make_float2(1.0f, 1.0f);
              if constexpr (kBlock) fac = *reinterpret_cast<const float2*>(scale_smem + kbl * kTokens + 8 * i + 2 * t);
              acc[i][0] = fmaf(tmp[0], fac.x, acc[i][0]);
              acc[i][1] = fmaf(tmp[1], fac.y, acc[i][1]);
              acc[i][2] = fmaf(tmp[2], fac.x, acc[i][2]);
              acc[i][3] = fmaf(tmp[3], fac.y, acc[i][3]);
            }
          }
        } else {
          // Swap upper halves with lane t^2: afterwards (w0*) holds this lane's 8 bytes of the
          // step's group 0 and (w1*) those of group 1, for rows g (a) and g+8 (b).
          const uint32_t xaz = __shfl_xor_sync(0xFFFFFFFFu, ra.z, 2), xaw = __shfl_xor_sync(0xFFFFFFFFu, ra.w, 2);
          const uint32_t xbz = __shfl_xor_sync(0xFFFFFFFFu, rb.z, 2), xbw = __shfl_xor_sync(0xFFFFFFFFu, rb.w, 2);
          const bool upper = t >= 2;  // this lane's own bytes are in group 1
          const uint32_t w0a0 = upper ? xaz : ra.x, w0a1 = upper ? xaw : ra.y;
          const uint32_t w0b0 = upper ? xbz : rb.x, w0b1 = upper ? xbw : rb.y;
          const uint32_t w1a0 = upper ? ra.x : xaz, w1a1 = upper ? ra.y : xaw;
          const uint32_t w1b0 = upper ? rb.x : xbz, w1b1 = upper ? rb.y : xbw;
          const int gl = 2 * s;
          const float fb0 = fb_warp[gl], fb1 = fb_warp[gl + 1];
#pragma unroll
          for (int i = 0; i < kTiles; ++i) {
            const uint4 av = a_fragment(i, s);
            const float2 fa0 = *reinterpret_cast<const float2*>(scale_smem + gl * kTokens + 8 * i + 2 * t);
            const float2 fa1 = *reinterpret_cast<const float2*>(scale_smem + (gl + 1) * kTokens + 8 * i + 2 * t);
            float tmp[4];
            mma(tmp, w0a0, w0b0, w0a1, w0b1, av.x, av.y, zero4);
            const float f00 = fa0.x * fb0, f01 = fa0.y * fb0;
            acc[i][0] = fmaf(tmp[0], f00, acc[i][0]);
            acc[i][1] = fmaf(tmp[1], f01, acc[i][1]);
            acc[i][2] = fmaf(tmp[2], f00, acc[i][2]);
            acc[i][3] = fmaf(tmp[3], f01, acc[i][3]);
            mma(tmp, w1a0, w1b0, w1a1, w1b1, av.z, av.w, zero4);
            const float f10 = fa1.x * fb1, f11 = fa1.y * fb1;
            acc[i][0] = fmaf(tmp[0], f10, acc[i][0]);
            acc[i][1] = fmaf(tmp[1], f11, acc[i][1]);
            acc[i][2] = fmaf(tmp[2], f10, acc[i][2]);
            acc[i][3] = fmaf(tmp[3], f11, acc[i][3]);
          }
        }
        if constexpr (kTma) {
          // After a slot's last step every lane's MMAs have consumed it: refill it with the slot
          // sequence S ahead.
          const int j = s >> q_log2;
          if (((s + 1) & ((1 << q_log2) - 1)) == 0 || s + 1 == steps) {
            // Write after read across proxies (see "Ring memory ordering" above).
            weave::ptx::fence_proxy_async_shared_cta();
            __syncwarp();
            if (lane == 0 && ((j + (1 << slots_log2)) << q_log2) < steps) issue_slot(j + (1 << slots_log2));
          }
        } else {
          // Refill the consumed registers with the step kInFlight ahead.
          const int s_next = s + kInFlight;
          const bool in_k = s_next < steps && lane_k + int64_t(kStepBytes) * s_next < k1;
          buf_a[u] = ptx::ld_global_nc_na_l2_256b_v4_pred(src_a + int64_t(kStepBytes) * s_next, in_k && ok_a);
          buf_b[u] = ptx::ld_global_nc_na_l2_256b_v4_pred(src_b + int64_t(kStepBytes) * s_next, in_k && ok_b);
        }
      }
    }
  }

  if constexpr (kPush && std::is_same_v<Epilogue, GemvStoreEpilogue>) {
    gemv_push_reduce<kMode, kTiles, kThreads>(p, acc, land_bar_u32, rows_max, my_first, my_rows, false, scale_smem);
    return;
  } else if constexpr (kPush) {
    // Another epilogue (GemmAllReduce's) reads this CTA's rows from the landing region through the
    // same hooks; nobody reads a peer's shared memory, so no barrier follows. A landing wait that
    // gave up (recorded; a peer of this GPU stuck for 40 s) hands the hooks no rows (landed null):
    // they then send nothing a peer would sum.
    const bool landed = gemv_push_partials<kTiles, kGranule>(p, acc, land_bar_u32, rows_max, epi.skips_push(rank));
    cg::cluster_group cluster = cg::this_cluster();
    const GemvBand b{nullptr, scale_smem, rank, split, band, landed ? landing_floats(land_bar_u32) : nullptr,
                     rows_max, my_first};
    epi.template reduce<kMode, kTokens>(p, cluster, b);
    epi.finish(p, b);
    return;
  }
  // --- cluster reduction of the fp32 partial tiles [kTokens, 128 rows] ---
  __syncthreads();  // every warp is done with the A slice: the partial tile may alias it
  float* part = reinterpret_cast<float*>(smem);
  {
    const int r = warp * kRowsPerWarp + g;
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      const int tok = 8 * i + 2 * t;
      part[tok * kPartStride + r] = acc[i][0];
      part[(tok + 1) * kPartStride + r] = acc[i][1];
      part[tok * kPartStride + r + 8] = acc[i][2];
      part[(tok + 1) * kPartStride + r + 8] = acc[i][3];
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // release/acquire at cluster scope: every rank's partial tile is visible
  const GemvBand b{part, scale_smem, rank, split, band};
  epi.template reduce<kMode, kTokens>(p, cluster, b);
  cluster.sync();  // no rank leaves (freeing its shared memory) while another still reads it
  epi.finish(p, b);
}

template <ScaleMode kMode, int kTiles, WeightPath kPath, int kDepth>
__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(const KernelParams p, const __grid_constant__ CUtensorMap b_map) {
  GemvStoreEpilogue epi;
  gemv_body<kMode, kTiles, kPath, kDepth>(p, b_map, epi);
}

}  // namespace weave::detail::gemv
