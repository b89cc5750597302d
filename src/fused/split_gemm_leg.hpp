// A split mode's GEMM where weave::Gemm would not run one pass of whole tiles. At small m and long
// K the standalone planner runs the decode GEMV (m <= 8) or splits K (the output tiles leave SMs
// idle): 1.1-2.9x faster there than one pass of the op's tile (docs/perf/fused.md "planner's
// tiles"). A fused epilogue stores and signals final tiles and cannot follow; a split mode's
// GEMM, which only writes the rows its collective then moves, can. This is that GEMM: weave::
// Gemm's plan of the rows on the op's CTAs, the same kernels, into the op's rows; the K split's
// fp32 partials go to scratch the op names. Where that plan is one pass of tiles the op keeps its
// own tile plan, so fused == split bitwise there.
#pragma once
#include <cstdint>
#include <string>

#include "gemm/dispatch.hpp"
#include "weave/gemm.hpp"
#include "weave/tensor.hpp"

namespace weave::hopper {
struct WaitTimeoutRecord;
}

namespace weave::fused {

enum class SplitLegKind : uint8_t {
  kTiles,   // the op's own tile plan (one pass of whole tiles)
  kGemv,    // the decode GEMV
  kSplitK,  // the tile's fp32 instance over K ranges, then gemm::split_k_reduce in split order
};

struct SplitGemmLeg {
  SplitLegKind kind = SplitLegKind::kTiles;
  GemmPlan plan;                    // weave::Gemm's plan of the rows (kGemv, kSplitK)
  const gemm::GemmInstance* partials_kernel = nullptr;  // kSplitK: plan.kernel, the fp32-output instance
  uint64_t partials_bytes = 0;      // kSplitK: split_k x m x N fp32
  std::string note;                 // why, one clause for the op's plan reason ("" for kTiles)
};

// Where the leg may go: the GEMV only where no rank shares the GPU (a cluster GEMV could find no
// room beside a peer's waiting collective there), the K split only where its partials fit.
struct SplitLegRoom {
  bool gemv = true;
  uint64_t scratch_bytes = 0;
};

// The leg of problem p (rows m of one rank) on `ctas` CTAs: weave::Gemm's plan there (blockscale's
// A scales as given: no copy pass), taken where it is the GEMV or a K split. A split whose partials
// do not fit room.scratch_bytes is cut to the most splits that fit where the split-K model says
// they still pay (weave::Gemm's tile), else none. kTiles otherwise, and always for mxfp8 (the op's
// own bf16 route decides there). Pure (CPU).
SplitGemmLeg plan_split_gemm_leg(const GemmProblem& p, int ctas, const SplitLegRoom& room);

// Bytes of the K split's partials of p at `split_k` splits.
uint64_t split_k_partials_bytes(const GemmProblem& p, int split_k);
// The most partials bytes weave::Gemm's planner can ask for at any m <= p.m on `ctas` CTAs: it
// splits only where the tiles leave CTAs idle, S <= ctas / tiles, so S x m x N <= ctas x the
// largest tile's area; and S <= min(16, K / 1024). 0 where K cannot split (K < 2048). A workspace
// of this many bytes (beside the routes' buffers) holds every call's split whole.
uint64_t split_k_partials_bound(const GemmProblem& p, int ctas);

// Enqueues a kGemv or kSplitK leg for checked operands (the GEMV's scales dense): C = out [m, N]
// with leading dimension N, partials at `partials` (16-byte aligned, leg.partials_bytes; kSplitK
// only). Waits that time out record into `record` (the op's check() reports them). Enqueue only.
void enqueue_split_gemm_leg(const SplitGemmLeg& leg, const GemmProblem& p, const TensorView& a, const TensorView& b,
                            const GemmScales& s, void* out, float* partials, int ctas,
                            hopper::WaitTimeoutRecord* record, cudaStream_t stream);

}  // namespace weave::fused
