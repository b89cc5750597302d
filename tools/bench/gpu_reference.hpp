// A simple, obviously correct GPU reference GEMM and a device-side comparison, for validating
// large benchmark outputs without copying them to the host (../shared/MEASURE.md).
//
// gpu_reference_gemm: C_ref[M,N] (fp32, row-major, ld = N) = sum_k deq(A)[m,k] * deq(B)[n,k].
// Every operand element is dequantised on the fly exactly as weave::ref::dequantize defines it
// (element x its scale, in fp32), then multiplied and accumulated in fp32 in increasing k order.
// One 64x64 output tile per block of 256 threads, 4x4 outputs per thread, a 16-deep K slice staged
// through shared memory: deliberately plain (no tensor cores, no fp8 instructions, no TMA), so it
// shares no code path with the kernels it checks. Modes: bf16, ptpc, blockscale, mxfp8 with raw
// or packed scales (packed: the scale view is a ue8m0 matrix [ceil(K/128), 4 * scale_rows] holding
// the uint32 words of weave::ref::pack_mxfp8_scales).
//
// gpu_compare: counts, over an output of M x N (fp32 or bf16, any ld) against an fp32 reference:
//   wrong          |out - ref| > atol + atol_rms * rms(ref) + rtol * |ref| where both are finite;
//                  out non-finite where ref is finite; out never written (poison bit pattern);
//                  where ref is non-finite (NaN propagation tests), out of another class
//                  (a NaN for a NaN, the same infinity for an infinity) counts as correct.
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

ref::Comparison gpu_compare(const TensorView& out, const float* ref, const Tolerance& tol,
                            cudaStream_t stream);

}  // namespace weave::bench
