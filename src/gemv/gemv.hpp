// Decode GEMV (M <= 32): C[M,N] = A[M,K] * B[N,K]^T, memory-bound on the weight read B.
// Internal interface between weave::Gemm (which plans and validates) and the GEMV kernels.
// Operands have already been validated by Gemm; scales are read in their raw layout.
//
// How it works (src/gemv/gemv_kernel.cuh has the details):
//   - one CTA = 8 warps = 128 rows of B (16 per warp) x one K slice; the K slices of one row band
//     form a thread-block cluster of `split` CTAs whose fp32 partials are summed through
//     distributed shared memory (no atomics, no workspace, deterministic order);
//   - the weights stream through registers with 16-byte loads, several steps in flight per
//     thread, and A [M, K slice] (tiny) is staged once per CTA in shared memory; or (bf16, the
//     default there) a producer warp streams weights and A together through a deep TMA ring
//     (gemv_stream_kernel.cuh), bitwise equal to the registers path at the same split;
//   - the product runs on the tensor cores (mma.sync m16n8, weights as the 16-row operand, the
//     M <= 32 tokens as 1, 2 or 4 n8 tiles); blockscale and mxfp8 partial sums are promoted into
//     fp32 accumulators with the product of the two scales per 128- or 32-wide K group.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>

#include "weave/gemm.hpp"

namespace weave::hopper {
struct WaitTimeoutRecord;  // hopper/wait_record.hpp
}

namespace weave::detail {

inline constexpr int64_t kGemvMaxM = 32;

// How the weights reach the tensor cores (gemv_kernel.cuh, "Weight stream"): each lane's own
// 16-byte loads into registers, a per-warp TMA ring in shared memory (more bytes in flight), or
// (bf16) the stream path: a producer warp's CTA-wide TMA ring of weights and activations, no A
// slice staged (gemv_stream_kernel.cuh).
enum class WeightPath { kRegisters, kTma, kStream };
const char* to_string(WeightPath path);
// The TMA ring of each warp: `slots` slots of `steps_per_slot` consecutive steps (a step: the
// warp's 16 rows x 64 bytes of K), both powers of two. Default: 8 slots of 1 step (8 KB in flight).
struct RingShape {
  int steps_per_slot = 1;
  int slots = 8;
  friend bool operator==(const RingShape&, const RingShape&) = default;
};
inline constexpr int kGemvMaxSplit = 16;  // cluster size (any 1..16); > 8 uses a non-portable cluster
// The stream path's ring: stages of 128 bytes of each of a CTA's 128 rows (and of A's tokens).
inline constexpr int kGemvDefaultStreamStages = 8;
// ... and the planner's where 8 stages (one CTA per SM) would take more than one wave.
inline constexpr int kGemvShallowStreamStages = 4;
// The planner streams bf16 from this many 128-row bands of N (below it, the registers path).
inline constexpr int64_t kGemvStreamMinBands = 32;

struct GemvArgs {
  const void* a = nullptr;        // [M, K] bf16 or e4m3, row stride lda (elements)
  const void* b = nullptr;        // [N, K] same dtype, row stride ldb
  const void* scale_a = nullptr;  // per mode (weave/gemm.hpp); raw layout, dense (but see below)
  const void* scale_b = nullptr;
  // Blockscale only: element strides of scale_a [M, K/128] (row, K block); 0, 0 = dense
  // row-major. MN-major scales (ScaleLayout::kMnMajor) are (1, ld).
  int64_t scale_a_row_stride = 0, scale_a_k_stride = 0;
  void* c = nullptr;              // [M, N] out dtype, row stride ldc
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  ScaleMode mode = ScaleMode::kBF16;
  DType out_dtype = DType::kBF16;
  int split = 0;     // K split (cluster size) 1..16; 0 = planner's choice
  // Programmatic dependent launch: the kernel starts streaming B before the preceding kernel on
  // the stream has finished (A, the scales and C are touched only after griddepcontrol.wait).
  // Only for weights B that no preceding kernel writes.
  bool pdl = false;
  // The planner's path when it fits (kAuto), or one forced (tests and benches compare them).
  enum class Path { kAuto, kRegisters, kTma, kStream } path = Path::kAuto;
  RingShape ring{};  // kTma (forced) only; planned calls take WEAVE_GEMV_PATH's ring or the default
  // kStream only: ring stages 2..16 (0: kGemvDefaultStreamStages, or WEAVE_GEMV_PATH's stream:S).
  int stages = 0;
  // kStream only, a diagnostic: stages whose weights are requested before the PDL wait and ahead of
  // A's boxes (0: gemv::kStreamPrologueStages).
  int stream_prologue = 0;
  // Registers path at one token tile (M <= 8) only: warp steps in flight, 4 or 8; 0 = the mode's
  // default (bf16 4, fp8 8), or WEAVE_GEMV_PATH's registers:D for planned calls. A diagnostic.
  int depth = 0;
  // Where the kernel records a wait that timed out: a fused op's own record (its check() reports
  // it), or null for the process-wide one (weave::Gemm::check()).
  hopper::WaitTimeoutRecord* record = nullptr;
};

// The launch shape the GEMV uses for a problem (a pure function; tests and benches print it).
struct GemvConfig {
  int tiles = 0;              // n8 token tiles: 1 (M <= 8), 2 (M <= 16), 4 (M <= 32)
  int split = 0;              // CTAs per cluster along K
  int64_t k_slice_bytes = 0;  // K bytes per CTA (multiple of 64)
  int64_t n_blocks = 0;       // 128-row bands of B
  int smem_bytes = 0;         // dynamic shared memory per CTA
  WeightPath path = WeightPath::kRegisters;
  RingShape ring{};           // tma path
  int depth = 0;              // registers path, one token tile: steps in flight forced (0: default)
  int stages = 0;             // stream path: ring stages
  int clusters_per_wave = 0;  // clusters of this shape resident at once (GemvResidency)
  int64_t waves = 0;          // ceil(n_blocks / clusters_per_wave)
  bool device_residency = false;  // clusters_per_wave came from the device, not the model
  // "gemv tma tiles 4 split 8 k_slice 256 B grid 8x40 smem 82 KB 1 wave"
  std::string describe() const;
};

// How many clusters of a launch shape (cfg.split, cfg.smem_bytes, kernel) the GPU holds at once.
// The planner keeps a call within one wave of clusters where it can: on H100 a 64-band GEMV split 4
// ways fitted 60 clusters, and the 4 left over doubled the time of their SMs (docs/perf/gemm.md).
using GemvResidency = std::function<int(const GemvConfig& cfg)>;
// The current device's answer (cudaOccupancyMaxActiveClusters for the mode's kernel), cached per
// device and shape. gemv_launch plans with it.
// all_reduce_epilogue: of the kernel with GemmAllReduce's epilogue (gemv/gemv_all_reduce.hpp).
GemvResidency gemv_device_residency(ScaleMode mode, bool all_reduce_epilogue = false);

// "" if the GEMV path implements this problem (M <= 32, mode, layout raw, out dtype), else why not.
std::string gemv_unsupported_reason(const GemmProblem& problem);
// Throws kInvalidArgument for a problem gemv_unsupported_reason refuses or a bad split.
// The path: `path` when forced (refused when its shared memory does not fit), else registers, or
// the TMA ring where WEAVE_GEMV_PATH=tma and it fits.
// WEAVE_GEMV_PATH (auto | registers | registers:D | tma | tma:QxS | stream | stream:S, default auto;
// D the steps in flight at one token tile, 4 or 8; QxS a ring of S slots of Q steps, powers of two,
// Q x S <= 16; S the stream ring's stages, 2..16; the stream path is bf16's only),
// parsed; throws kInvalidArgument naming the variable and the rule for any other value.
// gemv_config reads it once per process.
struct GemvPathChoice {
  GemvArgs::Path path = GemvArgs::Path::kAuto;
  RingShape ring{};
  int depth = 0;
  int stages = 0;
};
GemvPathChoice gemv_path_from_env();
// `residency` empty: the model, every SM holding as many CTAs of any cluster as its registers and
// shared memory allow (what weave::Gemm's plan describes without asking the device).
// one_wave: only splits whose clusters are all resident at once (Error kUnavailable when none is).
// depth: GemvArgs::depth (0: the default, or the variable's for a planned path).
// stages: GemvArgs::stages (stream path).
// landing_granule: the row granule of the kernel's pushed cluster reduction, which sizes its landing
// region (gemv/gemv_push_reduce.cuh): 1 for the GEMV's own store, 4 for GemmAllReduce's epilogue
// (whole LL units).
GemvConfig gemv_config(const GemmProblem& problem, int num_sms, int split_override = 0,
                       GemvArgs::Path path = GemvArgs::Path::kAuto, RingShape ring = {},
                       const GemvResidency& residency = {}, bool one_wave = false, int depth = 0, int stages = 0,
                       int landing_granule = 1);
// K's 64-byte steps (the unit the GEMV's K split shares out): the planner splits at most this many ways.
int64_t gemv_k_steps(const GemmProblem& problem);
// The K split gemv_launch plans for `problem` on `num_sms` SMs on the registers path (split 0): what
// the all-reduce epilogue's planner (a registers kernel) takes where it fits one wave. Every path
// sums K in the same order at one split, so GemmAllReduce's decode mode, which runs that split,
// stays bitwise equal to decode-fused on either path.
int gemv_planned_split(const GemmProblem& problem, int num_sms);
// Enqueues the GEMV on `stream`; no allocation, no sync, graph-capturable. Throws weave::Error
// (kInvalidArgument) for arguments that break the rules above (shape, alignment, null pointers).
void gemv_launch(const GemvArgs& args, int num_sms, cudaStream_t stream);

}  // namespace weave::detail
