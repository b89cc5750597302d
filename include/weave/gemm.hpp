// weave::Gemm: C[M,N] = A[M,K] * B[N,K]^T with fp32 accumulation, on Hopper.
//
// Operands (all device memory, K-contiguous, 16-byte aligned base and leading dimension):
//   A      [M, K]  bf16 (mode bf16) or e4m3 (ptpc, blockscale, mxfp8)
//   B      [N, K]  same dtype as A (a linear layer's weight, row-major [out, in])
//   C      [M, N]  bf16 or fp32, row-major with leading dimension ldc
//   scales (see GemmScales): none for bf16; fp32 [M] and [N] for ptpc; for blockscale fp32
//          [M, K/128] and [ceil(N/128), K/128], both row-major (K-block contiguous, scale_layout
//          raw), or A's M-contiguous (scale_layout mn-major: strides (1, ld), ld >= M and a multiple
//          of 4, 16-byte aligned; faster: each stage's A scales arrive in its TMA transaction;
//          bitwise identical results); for mxfp8 either
//          raw:    ue8m0 [M, K/32] and [ceil(N/32), K/32], row-major, any leading dimension, or
//          packed: the uint32 words of weave::ref::pack_mxfp8_scales ([ceil(K/128), rows], rows =
//                  M and ceil(N/32)) viewed as ue8m0 [ceil(K/128), 4 * rows] (ld a multiple of 4),
//          selected by GemmProblem::scale_layout; both 4-byte aligned. Raw and packed give
//          bitwise identical results. An 0xFF scale byte is NaN: every output it touches is NaN.
//
// split-K: a plan with split_k > 1 (the planner's choice where the output tiles leave SMs idle
// and K is long, or GemmPlanOverrides::split_k) needs a device workspace of workspace_bytes()
// (fp32 partials [split_k, M, N]) handed to set_workspace before run(); run() throws
// kInvalidArgument naming set_workspace otherwise. The partials are summed in split order, so
// results are bitwise reproducible. One run at a time may use a given workspace (stream order).
// Decode sizes the planner gives to the tiled kernels (bf16 and fp8 m 9-32: DecodeRoute)
// may split K too: check workspace_bytes() at every m, or force the GEMV (no workspace).
//
// mxfp8 routes (m > 32, the tiled kernels): `native` runs the fp8 kernel, which promotes every
// 32-wide K group with its two scales; `bf16` first converts A and B, scales folded in, to bf16
// in the workspace (exact: e4m3 x 2^(e-127) is a bf16 number for every scale byte in [10, 246])
// and runs the bf16 kernel, with no promotion at all. The planner takes the one its model says
// is faster (GemmPlan::mx_dequant, and the reason says why); GemmPlanOverrides::mx_route forces
// one, and a forced tile or K split without a route names the native kernels. On the bf16 route a
// non-zero element under a scale byte outside [10, 246] (a value the conversion might round) is
// detected on the GPU, and the same call then reruns on the native kernel (GemmPlan::
// fallback_kernel, launched every call and returning at once unless needed): results never come
// from rounded operands. The route needs workspace_bytes() of workspace (the bf16 copies).
//
// blockscale with row-major A scales (scale_layout raw; m > 32, the tiled kernels): the kernel
// that reads them as given gathers each stage's strided scale column with one 4-byte copy per row,
// 3-14% slower than the MN-major kernel (docs/perf/gemm.md step 11). Where the planner's model
// says the difference outweighs one extra pass (GemmPlan::scale_a_mn_copy, the reason says
// why; GemmPlanOverrides::scale_a_route forces either), run() first copies A's scales into
// MN-major order in the workspace, then runs the MN-major kernel: results are bitwise identical
// (the same wgmmas and fma order), and that route needs workspace_bytes() of workspace too.
//
// Verbs (same on every op): `gemm_validate_problem` returns "" or every reason a problem cannot
// run, and is the check the constructor and `gemm_plan` call; `plan` is a pure function of the problem and the SM count; the
// constructor validates and plans once (throws weave::Error naming the argument and the rule);
// `run(stream)` only enqueues: no allocation, no host sync, graph-capturable. Thread scope: one
// Gemm object per thread at a time; distinct objects are independent.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "weave/export.hpp"
#include "weave/tensor.hpp"
#include "weave/types.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace weave WEAVE_API {

struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  ScaleMode mode = ScaleMode::kBF16;
  ScaleLayout scale_layout = ScaleLayout::kRaw;  // mxfp8 (raw, packed), blockscale (raw, mn-major)
  DType out_dtype = DType::kBF16;
};

// mxfp8 on the tiled kernels: the planner's choice, the fp8 kernel, or the bf16 route (above).
enum class MxRoute : uint8_t { kAuto, kNative, kBf16 };
// blockscale with scale_layout raw on the tiled kernels: the planner's choice, the kernel that
// reads A's row-major scales as given, or A's scales copied into MN-major order first (above).
enum class ScaleARoute : uint8_t { kAuto, kAsGiven, kMnMajorCopy };
// m <= 32: the planner's choice (the decode GEMV where it was measured faster than the tiled
// kernels: m <= 8, mxfp8 at m <= 32; one route per m and mode, docs/gemm.md
// "Decode GEMV"), the GEMV forced (refused where it cannot run the problem or with a tile
// override), or the tiled kernels forced (refused where they cannot run it). Above m = 32 only
// kAuto and kTiles.
enum class DecodeRoute : uint8_t { kAuto, kGemv, kTiles };
std::string_view to_string(DecodeRoute route) noexcept;                      // "auto", "gemv", "tiles"
std::optional<DecodeRoute> parse_decode_route(std::string_view name) noexcept;

// Overrides for the planner (0 / empty = let the planner choose).
struct GemmPlanOverrides {
  int block_m = 0, block_n = 0;  // tile shape, one of the built tiles
  int grid = 0;                  // persistent CTAs
  int split_k = 0;               // 1 = no split, 2..16 = split K that many ways (fp32 partials);
                                 // with decode_route = kGemv: the GEMV's K split (CTAs per cluster)
  int group_rows = 0;            // row blocks per L2 group of the tile order
  MxRoute mx_route = MxRoute::kAuto;  // mxfp8 only
  ScaleARoute scale_a_route = ScaleARoute::kAuto;  // blockscale with scale_layout raw only
  DecodeRoute decode_route = DecodeRoute::kAuto;   // m <= 32: the GEMV or the tiled kernels
  // CTAs per cluster of the tiled kernels: 1, or 2 (pairs of CTAs along M share each B tile,
  // loaded once and multicast to both; fp8 instances only, see `weave plan gemm`). 0: the
  // planner's choice, which is 1 until clusters are measured faster.
  int cluster = 0;
};

struct GemmPlan {
  int block_m = 0, block_n = 0, block_k = 0;
  int stages = 0;
  int cluster = 1;               // CTAs per cluster (TMA multicast of B across the pair)
  int grid = 0;                  // persistent CTAs launched
  int64_t tiles = 0;             // output tiles
  int split_k = 1;               // tiled: K splits (workspace_bytes() > 0 when > 1); GEMV: its cluster split
  int group_rows = 8;            // tile order: row blocks per group, each group swept along N
  bool gemv = false;             // the decode GEMV path (small M)
  bool mx_dequant = false;       // mxfp8 on the bf16 route: tile, split and kernel are the bf16 kernel's
  std::string fallback_kernel;   // mx_dequant: the native instance a call reruns on (see above)
  bool scale_a_mn_copy = false;  // blockscale raw: A's scales copied to MN-major in the workspace,
                                 // then the MN-major kernel (`kernel`) runs on the copy
  std::string kernel;            // instance name, e.g. sm90_gemm_bf16_bf16_store_128x256x64
  std::string reason;            // one line: why this plan
};

struct GemmScales {
  TensorView a;  // per mode, see above; rank 0 (default) for bf16
  TensorView b;
};

// "" if the problem (shape, mode, out dtype, layout) can run, else the rule it breaks.
std::string gemm_validate_problem(const GemmProblem& problem);
// Pure planner: tile and grid from M, N, K, mode and the SM count. Throws kInvalidArgument for
// an invalid problem or override.
GemmPlan gemm_plan(const GemmProblem& problem, int num_sms, const GemmPlanOverrides& overrides = {});
// Device workspace a plan of `problem` needs (what Gemm::workspace_bytes returns), so a caller can
// size it before constructing the op.
std::size_t gemm_workspace_bytes(const GemmProblem& problem, const GemmPlan& plan);

class Gemm {
 public:
  // Validates every operand against `problem` (shapes, dtypes, alignment, device) and plans.
  Gemm(const GemmProblem& problem, TensorView a, TensorView b, GemmScales scales, TensorView c,
       const GemmPlanOverrides& overrides = {});
  ~Gemm();
  Gemm(Gemm&&) noexcept;
  Gemm& operator=(Gemm&&) noexcept;

  const GemmPlan& plan() const;
  // Re-points the operands (same shapes/dtypes/device; checked) without re-planning, e.g. to
  // rotate cold weight copies. Builds new TMA descriptors on the host; no GPU work.
  void set_operands(TensorView a, TensorView b, GemmScales scales, TensorView c);
  // Bytes of device workspace this plan needs (split-K partials; the mxfp8 bf16 route's copies of
  // A and B and its flag word; blockscale's MN-major copy of A's scales); 0 if none.
  std::size_t workspace_bytes() const;
  void set_workspace(void* workspace, std::size_t bytes);
  // What the workspace holds for this plan, in words ("" if none): for messages.
  std::string workspace_purpose() const;
  // Programmatic dependent launch (PDL), the caller's opt-in; off by default. run() then launches
  // the GEMM kernel (the decode GEMV or the tiled kernel) with programmatic stream serialization:
  // it may begin while the kernel before it on the stream still runs, requests its first K slices
  // of B at once, and reads A, the scales and writes C (and the workspace) only after
  // griddepcontrol.wait, which returns once that kernel has completed and its writes are visible.
  // The caller's promise: no kernel that may run right before this GEMM on its stream writes B or
  // its scales (a model's weights: never). A kernel launched after it with programmatic stream
  // serialization must itself wait (cudaGridDependencySynchronize) before it reads C. The mxfp8
  // bf16 route (plan().mx_dequant) launches as without it. A graph captures the
  // setting of the run() it captured. Host state only: no GPU work.
  void set_allow_pdl(bool allow) noexcept;
  bool allow_pdl() const noexcept;
  // Enqueues the GEMM. Raises first (before enqueueing) what check() raises.
  void run(cudaStream_t stream) const;
  // Raises Error(kTimeout) naming block, thread, barrier, stage and time if a pipeline wait of a
  // GEMM kernel timed out since the last report: a protocol bug or a debug knob, never slowness
  // (the bound is 10 s). Such a kernel aborts cooperatively - every role exits, the CUDA context
  // stays usable - and that call's C is incomplete. The record is process-wide, so check() or
  // run() of any Gemm reports it, once. Does not synchronise: a call is seen once its stream has
  // run it (synchronise first).
  void check() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weave
