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

// HBM read rate a weight-streaming kernel sustains on an H200: the decode GEMV reaches 26-55% of
// the 4.8 TB/s peak (docs/gemm.md, GEMV section). Small-M GEMMs are modelled memory-bound on B.
inline constexpr double kModelledHbmGbps = 2000;

// NVLink bytes per second per direction per GPU with SM / TMA stores (2 x H200, docs/perf/comm.md).
inline constexpr double kModelledLinkGbps = 370;

// Copy-engine reads of a peer's window over NVLink (the ce pull all-gather, docs/perf/comm.md).
inline constexpr double kModelledCeLinkGbps = 380;
// One device-triggered copy's chain on a copy stream: kernel trigger store -> cuStreamWaitValue32 ->
// cuStreamWriteValue32 -> copy issued and done, on H200 (9.4-11.6 us measured for 64 KB-2 MB,
// docs/perf/fused.md "GemmAllGather fused-ce"); a stream runs its chains one after another.
inline constexpr double kModelledCeChainUs = 10;

}  // namespace weave::fused
