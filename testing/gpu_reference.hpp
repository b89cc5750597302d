// A simple, obviously correct GPU reference GEMM and a device-side comparison, for validating
// large benchmark outputs without copying them to the host (../shared/MEASURE.md).
//
// gpu_reference_gemm: C_ref[M,N] (fp32, row-major, ld = N) = sum_k deq(A)[m,k] * deq(B)[n,k].
// Every operand element is dequantised on the fly exactly as weave::ref::dequantize defines it
// (element x its scale, rounded once to fp32); each 16-deep K slice is summed in fp32, the slice
// sums in fp64 in increasing k order, then rounded once to fp32. (The total error must not grow
// with K, or it would eat into the checked kernels' bound; a pure fp64 reference was 4x slower,
// ~30 s for 8192^3 on an H200.) One 128x128 output tile per block of 256 threads, 8x8 outputs per
// thread, a 16-deep K slice staged through shared memory: deliberately plain (no tensor cores, no fp8 instructions, no TMA), so it
// shares no code path with the kernels it checks. Modes: bf16, ptpc, blockscale, mxfp8 with raw
// or packed scales (packed: the scale view is a ue8m0 matrix [ceil(K/128), 4 * scale_rows] holding
// the uint32 words of weave::ref::pack_mxfp8_scales).
//
// gpu_compare: counts, over an output of M x N (fp32 or bf16, any ld) against an fp32 reference:
//   wrong          |out - ref| > atol + atol_rms * rms(ref) + rtol * |ref| where both are finite;
//                  out non-finite where ref is finite; out never written (poison bit pattern);
//                  where ref is non-finite (NaN propagation tests), out of another class
//                  (a NaN for a NaN, the same infinity for an infinity) counts as correct.
//                  With `magnitude` (M x N floats, row-major), the relative term is
//                  rtol * magnitude[i] instead of rtol * |ref[i]|: for a reference that is a sum
//                  of terms which may cancel, whose rounding scales with the terms' sizes
//                  (testing/reduce_reference.hpp).
//   nonfinite      out NaN/Inf where ref is finite
//   never_written  out still holds bench::poison_nan's pattern (fp32 0x7FC00000, bf16 0x7FC0)
//   rel_l2, max_abs over elements where both are finite; first_wrong the smallest wrong index
//   (row-major over M x N).
// It runs two kernels (the reference norm, then the comparison) and synchronises `stream`.
#pragma once
#include <cstdint>

#include "weave/gemm.hpp"
#include "weave/reference.hpp"
#include "weave/tensor.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace weave::bench {

// `c_ref` must hold M * N floats on a's device. Scales as weave::Gemm takes them (GemmScales);
// problem.scale_layout selects raw or packed mxfp8 scales. Throws kInvalidArgument for operands
// that do not match the problem.
void gpu_reference_gemm(const GemmProblem& problem, const TensorView& a, const TensorView& b,
                        const GemmScales& scales, float* c_ref, cudaStream_t stream);

struct Tolerance {
  double rtol = 0;      // relative to |ref| of the element
  double atol = 0;      // absolute
  double atol_rms = 0;  // absolute, in units of rms(ref) over finite elements
};

// The bounds a GEMM output must meet against a reference computed from the same quantised
// operands (so quantisation error is not part of them; only accumulation and output rounding).
// Measured on H200 with cuBLASLt 13.0 (weave bench gemm, K = 640..8192, random_operand inputs):
//   bf16 inputs   fp32 out: max error 1.2e-4 x rms (8192^3)  -> rtol 1e-4, atol 5e-4 x rms
//                 bf16 out: rounding moves a value by at most half an ulp (<= 2^-8 relative), a
//                 sum near a rounding midpoint may round either way -> rtol 2^-7, atol 2e-3 x rms
//   fp8 inputs    (ptpc, blockscale, mxfp8) Hopper's fp8 tensor-core accumulator keeps ~13
//                 mantissa bits between promotions to fp32: rel_l2 1.3e-4, tails up to 3.7e-3 x
//                 rms (cuBLASLt, default accumulation) -> atol 1e-2 x rms; rtol 1e-3 (fp32 out)
//                 or 2^-7 (bf16 out)
//   fast_accum    fp8 partial sums never promoted; errors grow with K (more than 1e-2 x rms for
//                 1e-4 of the elements at K = 8192) -> atol 5e-2 x rms.
// A real defect (a missed tile, a wrong scale, a race) moves elements by O(rms) and stays visible.
Tolerance gemm_tolerance(ScaleMode mode, DType out_dtype, bool fast_accum = false);

ref::Comparison gpu_compare(const TensorView& out, const float* ref, const Tolerance& tol,
                            cudaStream_t stream, const float* magnitude = nullptr);

}  // namespace weave::bench
