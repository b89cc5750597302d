// Arguments of the GEMM kernels: what the host (weave::Gemm, or a fused op) fills and passes by
// value as one __grid_constant__ parameter. Host/device POD, no device code, so plain C++
// translation units can build it. The epilogue's parameters are a separate type so a fused
// epilogue (store into a peer window, store then signal) brings its own without touching these.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "hopper/wait_record.hpp"

namespace weave::gemm {

// What an instance is keyed by besides mode, dtypes and tile (gemm/dispatch.hpp); each epilogue
// policy and scheduler names its own kind.
enum class EpilogueKind { kStoreLocal, kAllGather, kAllReduce, kAgmRows };
enum class SchedulerKind { kGroupedRows, kBandRound, kRotatedRows };

struct MainloopArgs {
  CUtensorMap tma_a;  // A [M, K], box [block_m, block_k], 128B swizzle
  CUtensorMap tma_b;  // B [N, K], box [block_n, block_k], 128B swizzle
  // Blockscale with MN-major A scales (ScaleLayout::kMnMajor) only: scale_a as [K/128 rows, M cols]
  // fp32 (row stride scale_a_ld), box [1, block_m], no swizzle. Unused otherwise.
  CUtensorMap tma_scale_a;
  // A again with box [64, block_k] (128-row tiles): a plain GEMM's tile whose upper 64 rows lie past
  // M loads only its lower half (gemm/kernel.cuh kHalfBoxA). Unused otherwise.
  CUtensorMap tma_a_half;
  // ptpc: fp32 [M] and [N]. blockscale: fp32 [M, K/128] (row stride scale_a_ld; MN-major: column
  // stride scale_a_ld, read through tma_scale_a) and [ceil(N/128), K/128] (row stride scale_b_ld). mxfp8 raw: ue8m0 bytes [M, K/32] and
  // [ceil(N/32), K/32] (row strides in bytes); mxfp8 packed: uint32 words [ceil(K/128), M] and
  // [ceil(K/128), ceil(N/32)] (row strides in words). bf16: unused.
  const void* scale_a = nullptr;
  const void* scale_b = nullptr;
  int64_t scale_a_ld = 0;
  int64_t scale_b_ld = 0;
  int32_t m = 0, n = 0, k = 0;
  int32_t group_rows = 8;  // tile scheduler: row blocks per L2 group (GemmPlan::group_rows)
  // split-K: work item w covers tile (w % tiles) over K blocks [s * k_blocks_per_split,
  // (s + 1) * k_blocks_per_split) with s = w / tiles; its fp32 partial goes to rows [s * M, s * M + M)
  // of the epilogue's output ([split_k * M, N], the workspace). split_k = 1: the whole K, rows as is.
  // The host guarantees every split holds at least one K block.
  int32_t split_k = 1;
  int32_t k_blocks_per_split = 0;  // 0: all K blocks (split_k must then be 1)
  // Debug-only negative control (WEAVE_GEMM_DEBUG_DROP_WAIT=1): consumers read a stage before
  // waiting on its full barrier (the wait moves after the reads, so the protocol still balances).
  // Results are then wrong whenever a consumer overtakes the TMA; tests use it to prove they see
  // pipeline races. Never set in production.
  int32_t debug_drop_full_wait = 0;
  // Debug-only (WEAVE_GEMM_DEBUG_STALL_K_BLOCK=k): the producer never loads K block k of each
  // CTA's first work item, so that stage's full barrier never completes and the pipeline waits
  // run into their bound: the test of the cooperative abort. -1: off. Never set in production.
  int32_t debug_stall_k_block = -1;
  // Where a timed-out pipeline wait records itself before the CTA aborts (host-mapped; may be null).
  hopper::WaitTimeoutRecord* timeout_record = nullptr;
  // Bound of every pipeline wait (0: hopper::kMbarrierTimeoutNs). A fused op whose consumers wait
  // for peers sets it above its communication timeout (hopper/pipeline.cuh).
  uint64_t pipeline_timeout_ns = 0;
  // Guarded launch (the mxfp8 bf16 route, gemm/mx_dequant.hpp): when set, every CTA returns at
  // once unless *run_if_flag != 0 (written by an earlier kernel in stream order), or, with
  // run_if_flag_clear, unless it is 0 (the fused operators' either/or: the bf16 kernel runs when
  // the conversion was exact, the native one when it was not).
  const uint32_t* run_if_flag = nullptr;
  int32_t run_if_flag_clear = 0;
  // Debug-only negative control (WEAVE_GEMM_DEBUG_EARLY_RELEASE=1): consumers release a stage on
  // its empty barrier as soon as it landed, before their wgmmas read it, so the producer may refill
  // it under them. Instances with one consumer role (gemm/kernel.cuh single_consumer_role) ignore
  // it (GemmKernelEntry::early_release_control). Never set in production. Last, in the
  // struct's tail padding, so no other field moves (the kernels' SASS stays as it was).
  int32_t debug_early_release = 0;
  // Programmatic dependent launch (weave::Gemm::set_allow_pdl; plain GEMM instances only): 0 for
  // a launch without the attribute, else kPdl* bits (gemm/kernel.cuh "Programmatic dependent
  // launch"). Also in the tail padding.
  uint32_t pdl_flags = 0;
};
inline constexpr uint32_t kPdlWait = 1u;             // the producer waits before it touches A or the scales
inline constexpr uint32_t kPdlBIntoRing = 2u;        // B of the first stages into the ring before the wait
inline constexpr uint32_t kPdlBIntoL2 = 4u;          // B of the first (flags >> 8) K blocks into L2 before it
inline constexpr uint32_t kPdlTriggerAtStart = 16u;  // every thread lets dependents launch at once
inline constexpr uint32_t kPdlTriggerLate = 32u;     // the producer warp, after its last load

// Epilogue "store through TMA": the staged epilogue (gemm/epilogue_staged.cuh) TMA-stores each
// finished tile from shared memory into `tma_c`, a 3-D map [planes, rows, cols] with boxes of
// [1, 64, epilogue_box_bytes] and the swizzle of that width (hopper::make_tma_3d_planes): C [M, N]
// is one plane; the split-K workspace [S, M, N] is S planes, split s storing into plane s. The map
// may name any global address: local C, a region of a SymmetricWindow, a peer's copy of it.
inline constexpr int kEpilogueBoxRows = 64;  // rows of one TMA-store box (one m64 wgmma slice)
// Bytes of one row of that box (one staging strip's row): 128 (128B swizzle) where a consumer
// warpgroup's columns fill whole 128-byte rows, else 64 (64B swizzle): bf16 output of a 160-wide
// tile is 320 bytes a row, five 64-byte strips. The kernel's SmemLayout takes this width, and its
// instance entry (GemmKernelEntry::epi_box_bytes) carries it to the host, which builds the map with it.
constexpr int epilogue_box_bytes(int wg_cols, int out_bytes) { return wg_cols * out_bytes % 128 == 0 ? 128 : 64; }
struct StoreLocalParams {
  CUtensorMap tma_c;
};

template <class EpilogueParams>
struct KernelArgs {
  MainloopArgs main;
  EpilogueParams epi;
  // 2-CTA clusters (TileShape::kClusterM = 2) only: B again with box [block_n / 2, block_k], 128B
  // swizzle; cluster CTA r loads rows [r * block_n / 2, (r + 1) * block_n / 2) of the pair's
  // shared B tile and multicasts them to both CTAs (make_multicast_b_map). Unused otherwise. Last,
  // so no other field moves (the other instances' SASS stays as it was).
  CUtensorMap tma_b_half;
};

using LocalKernelArgs = KernelArgs<StoreLocalParams>;
static_assert(std::is_trivially_copyable_v<LocalKernelArgs>);

}  // namespace weave::gemm
