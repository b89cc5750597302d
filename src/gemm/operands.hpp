// The tiled GEMM's operand rules and kernel-argument building, shared by weave::Gemm and the fused
// operators: a fused op checks A, B and the scales with the same rules, builds the same main-loop
// arguments (TMA maps, scales, split) from its plan, and brings its own epilogue parameters (its
// output lives in a window, not in a caller's C). Host only; every failure is a weave::Error
// (kInvalidArgument naming the argument and the rule).
#pragma once
#include <cuda.h>

#include <cstdint>

#include "gemm/kernel_args.hpp"
#include "gemv/gemv.hpp"
#include "weave/gemm.hpp"
#include "weave/tensor.hpp"

namespace weave::gemm {

// bf16 for mode bf16, e4m3 for every fp8 mode.
DType gemm_input_dtype(ScaleMode mode);

// A [M, K], B [N, K] and the scales of `p.mode` in the layouts weave/gemm.hpp documents, on
// `device`. (C is the caller's: weave::Gemm checks C [M, N] itself.)
void check_gemm_inputs(const GemmProblem& p, const TensorView& a, const TensorView& b, const GemmScales& s,
                       int device);

// The decode GEMV reads blockscale and mxfp8 scales densely (no leading dimension).
void check_gemv_scales(const GemmProblem& p, const GemmScales& s);
// Whether the decode GEMV can read these scales (dense rows; only blockscale and mxfp8 have rows).
bool gemv_scales_dense(const GemmProblem& p, const GemmScales& s);
// The decode GEMV's arguments for checked operands, C at `c` with leading dimension `ldc`
// (weave::Gemm's M <= 32 route and GemmAllReduce's decode mode).
detail::GemvArgs make_gemv_args(const GemmProblem& p, const TensorView& a, const TensorView& b, const GemmScales& s,
                                void* c, int64_t ldc);

// The plan of a fused operator's tile GEMM: exactly this tile and persistent grid, no K split (a
// fused epilogue stores or sends whole tiles); the planner's other choices as for any problem
// (the forced tile keeps mxfp8 on its native kernel).
GemmPlan fixed_tile_plan(const GemmProblem& p, int num_sms, int block_m, int block_n, int grid);

// Debug-only knobs of the main loop (weave::Gemm reads them from the environment at construction;
// a fused op never sets them). Defaults: production.
struct MainloopDebug {
  bool drop_full_wait = false;   // WEAVE_GEMM_DEBUG_DROP_WAIT=1: the dropped-wait negative control
  bool early_release = false;    // WEAVE_GEMM_DEBUG_EARLY_RELEASE=1: the early-release negative control
  int32_t stall_k_block = -1;    // WEAVE_GEMM_DEBUG_STALL_K_BLOCK=k: a stage never loaded (abort test)
  uint64_t pipeline_timeout_ns = 0;  // WEAVE_GEMM_DEBUG_PIPELINE_TIMEOUT_MS: the pipeline waits' bound
  static MainloopDebug from_env();  // logs a warning for every knob that is set
};

// The main-loop half of the kernel arguments for a tiled plan (TMA maps of A and B, scales and
// their strides, the K split, the debug knobs, the timeout record).
MainloopArgs make_mainloop_args(const GemmProblem& p, const GemmPlan& plan, const TensorView& a, const TensorView& b,
                                const GemmScales& s, const MainloopDebug& debug = {});

// A 2-CTA cluster plan's (plan.cluster = 2) half-B map: B [N, K] with box [block_n / 2, block_k]
// (KernelArgs::tma_b_half; each CTA of a pair loads one half of the shared tile, multicast).
CUtensorMap make_multicast_b_map(const GemmProblem& p, const GemmPlan& plan, const TensorView& b);

// The epilogue's TMA-store map over `planes` stacked [m, n] outputs of `dtype` with leading
// dimension `ld` (gemm/kernel_args.hpp, StoreLocalParams::tma_c): any global address, local C,
// a split-K workspace, a window region or a peer's copy of it. `box_bytes` is the kernel
// instance's strip row (GemmKernelEntry::epi_box_bytes: 128, or 64 where a warpgroup's columns are
// no whole 128-byte row, as for bf16 output of 160-wide tiles). No default: a map built at 128 bytes
// for a 64-byte-strip kernel stores wrong bytes, so every caller names the kernel it launches.
CUtensorMap make_epilogue_map(const char* what, void* base, DType dtype, int64_t planes, int64_t m, int64_t n,
                              int64_t ld, int box_bytes);

}  // namespace weave::gemm
