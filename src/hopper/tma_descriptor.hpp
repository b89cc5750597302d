// Host-side construction of TMA tensor maps (CUtensorMap) for 2-D row-major tensors, through the
// driver entry point fetched at run time (never a link-time libcuda dependency).
#pragma once
#include <cuda.h>

#include <cstdint>

#include "weave/types.hpp"

namespace weave::hopper {

enum class TmaSwizzle { kNone, k64B, k128B };

// A 2-D row-major tensor [rows, cols] with leading dimension `ld` (elements), loaded in boxes of
// [box_rows, box_cols]. Checks the TMA rules (16-byte aligned base and row pitch, box sizes
// 1..256, swizzled box rows of at most the swizzle's span: 64 or 128 bytes) and throws weave::Error naming `what` and the
// rule; CUDA_ERROR_* from the driver is thrown as kDriverError. Out-of-bounds box parts read zeros.
CUtensorMap make_tma_2d(const char* what, const void* base, DType dtype, int64_t rows, int64_t cols,
                        int64_t ld, int box_rows, int box_cols, TmaSwizzle swizzle);

// A stack of `planes` row-major [rows, cols] matrices (leading dimension `ld`, plane `p` starting
// `plane_stride` elements after plane p-1), accessed in boxes of [1, box_rows, box_cols]: the GEMM
// epilogue's TMA-store destination (C is one plane; the split-K workspace [S, M, N] is S planes, so
// a tile's rows past M are clipped inside its own plane instead of landing in the next one).
// Same rules and errors as make_tma_2d; plane_stride is in elements (its bytes a multiple of 16).
CUtensorMap make_tma_3d_planes(const char* what, const void* base, DType dtype, int64_t planes, int64_t rows,
                               int64_t cols, int64_t ld, int64_t plane_stride, int box_rows, int box_cols,
                               TmaSwizzle swizzle);

}  // namespace weave::hopper
