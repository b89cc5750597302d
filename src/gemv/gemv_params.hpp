// Kernel parameters of the decode GEMV and the per-mode launchers (one .cu per mode, so the
// builds of the four kernel families run in parallel). Host-side code fills KernelParams from
// GemvArgs and GemvConfig (gemv.cpp); the kernels take it by value.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "gemv/gemv.hpp"
#include "hopper/wait_record.hpp"

namespace weave::detail {
struct GemvAllReduce;  // gemv/gemv_all_reduce.hpp
}  // namespace weave::detail

#if defined(__CUDACC__)
#define WEAVE_GEMV_HD __host__ __device__ __forceinline__
#else
#define WEAVE_GEMV_HD inline
#endif

namespace weave::detail::gemv {

inline constexpr int kWarps = 8;
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kRowsPerWarp = 16;                       // the m16 of mma.sync
inline constexpr int kRowsPerCta = kWarps * kRowsPerWarp;     // one band of B rows
inline constexpr int kStepBytes = 64;                         // K bytes per row per warp step
inline constexpr int kPartStride = kRowsPerCta + 4;           // floats per token row of a partial
inline constexpr int kTmaBoxBytes = kRowsPerWarp * kStepBytes;  // one [16 rows, 64 B] box: a step
// The TMA ring of a CTA: 8 warps x S slots x q boxes, then the warps' S full barriers each, then
// the CTA's abort word (8 bytes kept).
constexpr int tma_ring_bytes(RingShape r) { return kWarps * r.slots * (r.steps_per_slot * kTmaBoxBytes + 8) + 8; }
// Dynamic shared memory per CTA: the registers path's A/scale region, or that region plus the
// ring, within 112 KB (2 CTAs per SM: 228 KB per SM, 1 KB of it reserved per CTA); a ring of more
// than 64 KB (a diagnostic) gets the whole SM's 227 KB.
inline constexpr int kMaxSmemBytes = 96 * 1024;
inline constexpr int kMaxSmemBytesTma = 112 * 1024;
inline constexpr int kMaxSmemBytesTmaWide = 227 * 1024;

// The stream path's CTA (gemv_stream_kernel.cuh): 8 consumer warps and a producer warp; a ring of
// stages, each 128 bytes of K of the band's 128 rows (two [128 rows, 64 B] boxes) and of A's tokens
// (two [8 x tiles, 64 B] boxes); then S full and S empty barriers and the abort word (8 bytes kept).
inline constexpr int kStreamThreads = kThreads + 32;
inline constexpr int kStreamStageK = 2 * kStepBytes;
inline constexpr int kStreamBoxB = kRowsPerCta * kStepBytes;
constexpr int stream_box_a_bytes(int tiles) { return 8 * tiles * kStepBytes; }
constexpr int stream_stage_bytes(int tiles) { return 2 * kStreamBoxB + 2 * stream_box_a_bytes(tiles); }
// The cluster reduction (gemv_push_reduce.cuh) lands the cluster's partial rows of this CTA's share
// in a region of a 16-byte slot for its mbarrier, then [split][ceil(128 / split) rows][8 x tiles
// tokens] floats, at most (128 + 15) rows' worth for a cluster of up to kGemvMaxSplit (16): on the
// stream path after the ring's abort word, on the other paths at the end of the dynamic shared memory.
// Rank q of a cluster of `split` owns rows [push_first_row(q), push_first_row(q + 1)) of the band
// (the pull reduction's shares) in whole granules of kGranule rows (1: the GEMV's store; 4: the
// all-reduce epilogue's LL units); push_owner is its inverse (the largest q whose first row <= r),
// push_rows_max the most rows any rank owns (the landing region's row stride). CPU-tested.
template <int kGranule = 1>
WEAVE_GEMV_HD constexpr int push_first_row(int q, int split) {
  return q * (kRowsPerCta / kGranule) / split * kGranule;
}
template <int kGranule = 1>
WEAVE_GEMV_HD constexpr int push_owner(int r, int split) {
  return ((r / kGranule + 1) * split - 1) / (kRowsPerCta / kGranule);
}
template <int kGranule = 1>
WEAVE_GEMV_HD constexpr int push_rows_max(int split) {
  return (kRowsPerCta / kGranule + split - 1) / split * kGranule;
}
constexpr int stream_landing_offset(int tiles, int stages) {
  return (stages * stream_stage_bytes(tiles) + 16 * stages + 8 + 15) / 16 * 16;
}
constexpr int push_landing_bytes(int tiles, int granule = 1) {
  return 16 + 8 * tiles * (kRowsPerCta + granule * (kGemvMaxSplit - 1)) * 4;
}
// Whether a GEMV kernel pushes its cluster reduction: the stream path always; the registers and TMA
// paths (the store and GemmAllReduce's epilogue) at one token tile (M <= 8), where the landing region
// costs 4.6-6.0 KB; wider tiles' 9-24 KB would cost M 17-32 a second wave (H100-like residency), so
// they pull.
constexpr bool pushes_reduction(WeightPath path, int tiles) { return path == WeightPath::kStream || tiles == 1; }
constexpr int stream_smem_bytes(int tiles, int stages) {
  return stream_landing_offset(tiles, stages) + push_landing_bytes(tiles);
}
inline constexpr int kMinStreamStages = 2, kMaxStreamStages = 16;
// Weight stages requested before the PDL wait, ahead of A's first boxes: A queued behind a whole
// 8-stage ring of weights cost ~1 us at 20-30 MB layers (H100: 8192 x 1280, 12.3 against 11.3 us
// with 1, 2 or 4; the same at 235 MB; docs/perf/gemm.md).
inline constexpr int kStreamPrologueStages = 4;

struct KernelParams {
  const uint8_t* a = nullptr;   // [M, K] bytes, row stride lda_bytes
  const uint8_t* b = nullptr;   // [N, K] bytes, row stride ldb_bytes
  const void* scale_a = nullptr;
  const void* scale_b = nullptr;
  int64_t sa_row_stride = 0, sa_k_stride = 0;  // blockscale: element strides of scale_a (row, K block)
  void* c = nullptr;            // [M, N], row stride ldc elements
  int m = 0, n = 0;
  int64_t k = 0;                // elements
  int64_t k_bytes = 0;
  int64_t lda_bytes = 0, ldb_bytes = 0, ldc = 0;
  int64_t k_slice_bytes = 0;    // per cluster rank, multiple of kStepBytes
  int a_stride = 0;             // shared-memory bytes per token row of the staged A slice
  int region0_bytes = 0;        // A slice, later aliased by the fp32 partial tile
  int scale_groups = 0;         // K groups per CTA held in shared memory (blockscale, mxfp8)
  int out_f32 = 0;              // 1: fp32 output, 0: bf16
  int ring_offset = 0;          // tma path: shared-memory byte offset of the ring (128-aligned)
  int ring_steps_log2 = 0, ring_slots_log2 = 3;  // tma path: log2 of RingShape's q and S
  int stages = 0;               // stream path: stages of the CTA's ring (gemv_stream_kernel.cuh)
  int prologue_stages = 0;      // stream path: weight stages issued before the PDL wait and A's first boxes
  hopper::WaitTimeoutRecord* record = nullptr;  // where a wait that timed out is recorded (ring, landing)
};
static_assert(std::is_trivially_copyable_v<KernelParams>);

// Per-mode launchers: grid (split, n_blocks), cluster (split, 1, 1), kThreads threads. `b_map`
// ([N, K] of B in [16, 64-byte] boxes) is read by the tma weight path only.
struct Launch {
  const GemvConfig& cfg;
  WeightPath path;
  bool pdl;
  cudaStream_t stream;
  // When set, nothing is launched: the number of clusters of cfg's shape that the current device
  // holds at once (cudaOccupancyMaxActiveClusters) is written here instead.
  int* max_active_clusters = nullptr;
};
// gemv.cpp's steps of gemv_launch, shared with gemv_all_reduce_launch: every rule of a call checked
// (Error kInvalidArgument) before anything touches the device, then the kernel parameters of a shape
// (the tma path's map not included).
GemmProblem checked_problem(const GemvArgs& args, int num_sms);
KernelParams kernel_params(const GemvArgs& args, const GemvConfig& cfg);

void launch_bf16(const KernelParams& p, const CUtensorMap& b_map, const Launch& l);
void launch_ptpc(const KernelParams& p, const CUtensorMap& b_map, const Launch& l);
void launch_blockscale(const KernelParams& p, const CUtensorMap& b_map, const Launch& l);
void launch_mxfp8(const KernelParams& p, const CUtensorMap& b_map, const Launch& l);
// The stream path (bf16 only; gemv_stream.cu): `a_map` is [M, K] of A in [8 x tiles, 64-byte] boxes,
// `b_map` [N, K] of B in [128 rows, 64-byte] boxes.
void launch_stream_bf16(const KernelParams& p, const CUtensorMap& b_map, const CUtensorMap& a_map, const Launch& l);
// The all-reduce epilogue's kernels (gemv_all_reduce.cu; registers path only).
void launch_all_reduce(ScaleMode mode, const KernelParams& p, const GemvAllReduce& ar, const Launch& l);

}  // namespace weave::detail::gemv
