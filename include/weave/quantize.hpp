// Activation quantisation on the GPU: the rows of a bf16 matrix x [M, K] into an fp8 GEMM's A
// operand, e4m3 q [M, K], and its scales, by weave/quant.hpp's reference rule bit for bit (tested
// against weave::ref::quantize in tests/gpu/test_quantize_rows.cu):
//   ptpc        scales fp32 [M]: amax(row) / 448 (a zero row gets 1); q = x / scale
//   blockscale  scales fp32 [M, K/128], row-major: per row and 128-wide K group, likewise
//   mxfp8       scales ue8m0 [M, K/32], row-major (the raw layout): per row and 32-wide K group,
//               OCP MX's shared exponent; q = x / 2^e, exact before the rounding
// then rounded to nearest even and saturated to +-448. A row or group holding NaN gets scale NaN
// (mxfp8: byte 0xFF; Inf too), as the reference says. One kernel launch, one CTA per row.
//
// Operands (device memory of one GPU, the current device): x and q K-contiguous with 16-byte
// aligned base and leading dimension; K a multiple of 16 (blockscale 128, mxfp8 32); scales
// contiguous rows (ptpc: a contiguous vector). Bad input throws weave::Error(kInvalidArgument)
// naming the argument and the rule, before any GPU work.
#pragma once
#include <cuda_runtime.h>

#include "weave/export.hpp"
#include "weave/tensor.hpp"
#include "weave/types.hpp"

namespace weave WEAVE_API {

// Enqueues the quantisation of x's rows on `stream`; q and scales are written, nothing else.
void quantize_rows(ScaleMode mode, const TensorView& x, const TensorView& q, const TensorView& scales,
                   cudaStream_t stream);

// The K group of one scale in `mode`: K (ptpc: the whole row), 128 (blockscale), 32 (mxfp8).
// Throws kInvalidArgument for bf16, which needs no quantisation.
int64_t quantize_group(ScaleMode mode, int64_t k);

}  // namespace weave
