// mxfp8 -> bf16 dequantisation, the first step of weave::Gemm's bf16 route for mxfp8 (the second
// is the bf16 kernel on the converted operands; GemmPlan::mx_dequant).
//
// Why the route exists: mxfp8's scales change every 32 K, so the native fp8 kernel promotes every
// k32 wgmma with one FMA per output element (as much FP32 work as the MMA is tensor work, see
// docs/gemm.md "mxfp8"). Folding the scales into the operands instead costs one pass over A and B
// and leaves a promotion-free bf16 GEMM, bounded by the bf16 tensor rate.
//
// Exactness: e4m3 x 2^(e - 127) has at most 4 significant bits and is exactly representable in
// bf16 (8 exponent bits, 7 mantissa bits), and a normal number, for every scale byte e in [10, 246]. Outside that range
// (scales near 2^-127 or 2^127) a non-zero element may round or overflow: the kernel then sets
// *inexact (atomicOr, 1) and weave::Gemm reruns the call on the native kernel, launched guarded by
// that flag (MainloopArgs::run_if_flag), so no result is ever built from rounded operands. NaN
// elements and 0xFF scales give NaN, as in the native kernel (an 0xFF scale makes every element of
// its block NaN, zeros included).
//
// Enqueue only: no allocation, no sync, graph-capturable. The caller zeroes *inexact first.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "weave/tensor.hpp"
#include "weave/types.hpp"

namespace weave::gemm {

struct MxDequantOperand {
  const uint8_t* src = nullptr;     // e4m3 [rows, k], leading dimension ld bytes (multiple of 16)
  int64_t rows = 0;
  int64_t ld = 0;
  const uint8_t* scales = nullptr;  // raw: ue8m0 [ceil(rows / rows_per_scale), k / 32], ld bytes;
  int64_t scale_ld = 0;             // packed: the ue8m0 view [ceil(k / 128), 4 x scale rows], ld bytes
  int rows_per_scale = 1;           // 1 for A (1x32 blocks), 32 for B (32x32 blocks)
  void* dst = nullptr;              // bf16 [rows, k], dense (ld = k)
};

// The conversion's view of one operand of weave::Gemm's layout (x [rows, k] e4m3, its ue8m0 scale
// view, 1 row per scale row for A, 32 for B), converted into `dst`.
MxDequantOperand mx_dequant_operand(const TensorView& x, const TensorView& scales, int rows_per_scale, void* dst);

// Converts A and B in one launch. k % 32 == 0 (the mxfp8 problem rule).
void mx_dequant_bf16(const MxDequantOperand& a, const MxDequantOperand& b, int64_t k, ScaleLayout layout,
                     uint32_t* inexact, int num_sms, cudaStream_t stream);

}  // namespace weave::gemm
