// What the fused operators' planners assume of the hardware (CPU only; docs/perf/fused.md has the
// measured values to compare with). One place, so GemmAllGather's and GemmAllReduce's models agree.
#pragma once
#include "weave/types.hpp"

namespace weave::fused {

// weave's GEMM at large shapes on an H200 (docs/perf/gemm.md): bf16 ~ 640, fp8 ~ 950, mxfp8 ~ 420
// TFLOP/s sustained.
inline double modelled_gemm_tflops(ScaleMode quant) {
  return quant == ScaleMode::kBF16 ? 640 : (quant == ScaleMode::kMxfp8 ? 420 : 950);
}

// NVLink bytes per second per direction per GPU with SM / TMA stores (2 x H200, docs/perf/comm.md).
inline constexpr double kModelledLinkGbps = 370;

}  // namespace weave::fused
