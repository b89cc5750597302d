// References for the collective side of the fused-op benchmarks (weave bench gemm-ag, gemm-ar),
// on the device so large outputs are never copied to the host:
//  - a rank's reference GEMM rounded into the output dtype: the input of a collective-only arm,
//    so the collective moves the very values the GEMM arms produce (up to the GEMM's error);
//  - the reference of an all-reduced GEMM: the sum of every rank's reference GEMM, the sum of the
//    terms' magnitudes, and the bound GemmAllReduce's output must meet against them;
//  - a bitwise comparison of two outputs (fused vs split-lsa are equal by design).
#pragma once
#include <cstddef>
#include <cstdint>

#include "testing/gpu_reference.hpp"
#include "weave/types.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace weave::bench {

// out[i] = ref[i] rounded to `out_dtype` (bf16 or fp32), i < elems; enqueued on `stream`.
void gpu_round_reference(const float* ref, void* out, std::size_t elems, DType out_dtype, cudaStream_t stream);

// sum[i] += term[i], magnitude[i] += |term[i]|, i < elems; enqueued on `stream`. Start both at 0.
void gpu_add_term(float* sum, float* magnitude, const float* term, std::int64_t elems, cudaStream_t stream);

// The bound of a bf16 sum of `world` ranks' bf16 GEMM partials (GemmAllReduce, and an all-reduce
// of partials rounded to bf16) against the summed reference, per element (pass it to gpu_compare
// with the magnitude from gpu_add_term):
//   |out - sum| <= (2^-8 + rtol) * magnitude + world * atol_rms * rms(sum)
// Each partial is rounded to bf16 once (<= 2^-9 of its size) and carries its GEMM's own error
// (gemm_tolerance(mode, bf16): rtol, atol_rms), and the sum is rounded once more; so an element
// whose terms cancel is bounded by their sizes, not by its own. A missed or misplaced term moves
// an element by about its size and stays visible.
Tolerance reduced_gemm_tolerance(ScaleMode mode, int world);

// Elements whose bit patterns differ between a and b (`elems` elements of `dtype`, 2 or 4 bytes,
// both on the current device); synchronises `stream`.
std::int64_t gpu_count_differing(const void* a, const void* b, std::size_t elems, DType dtype, cudaStream_t stream);

}  // namespace weave::bench
