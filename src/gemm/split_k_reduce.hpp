// The second step of split-K: C[M, N] = sum over s = 0..split_k-1 of partials[s, M, N] (fp32,
// row-major, ld = N), summed in that fixed order (bitwise deterministic), converted to the output
// dtype (RNE to bf16) and stored with C's leading dimension. Scales are already in the partials:
// each is the fp32-output kernel's result for its K range (ptpc's epilogue scale, blockscale's and
// mxfp8's main-loop scales applied). Enqueue only: no allocation, no sync, graph-capturable.
// With `pdl`, launched with programmatic stream serialization: its CTAs may be scheduled while the
// GEMM that writes the partials retires, and wait (griddepcontrol.wait, a no-op otherwise) for it
// to complete before any load (docs/memory_ordering.md "pdl").
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "weave/types.hpp"

namespace weave::gemm {

// Whether the split-K reduction launches with PDL after its GEMM: measured on the H100 over 10
// split plans per mode (docs/perf/gemm.md "split-K reduction with PDL"): ptpc 0.94-0.96x of the
// time without, bf16 and blockscale 0.99-1.03x; the cause of the difference is not profiled.
inline bool split_reduce_pdl(ScaleMode mode) { return mode == ScaleMode::kPtpc; }

// Requirements (checked by weave::Gemm, not here): n % 4 == 0; partials and c 16-byte aligned;
// ldc * sizeof(out) a multiple of 16 bytes.
void split_k_reduce(const float* partials, int64_t m, int64_t n, int split_k, void* c, int64_t ldc, DType out_dtype,
                    int num_sms, bool pdl, cudaStream_t stream);

}  // namespace weave::gemm
