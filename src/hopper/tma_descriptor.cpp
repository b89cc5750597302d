#include "hopper/tma_descriptor.hpp"

#include <cudaTypedefs.h>

#include "common/check.hpp"
#include "common/driver_api.hpp"

namespace weave::hopper {

static CUtensorMapDataType tma_dtype(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::kF32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::kE4M3:
    case DType::kUE8M0: return CU_TENSOR_MAP_DATA_TYPE_UINT8;  // TMA copies bytes; no conversion
  }
  return CU_TENSOR_MAP_DATA_TYPE_UINT8;
}

// The rules make_tma_2d and make_tma_3d_planes share; returns the row pitch in bytes (a
// single-row tensor still needs a valid multiple of 16).
static int64_t check_tma_matrix(const char* what, const void* base, int64_t elem, int64_t rows, int64_t cols,
                                int64_t ld, int box_rows, int box_cols, TmaSwizzle swizzle) {
  const auto addr = reinterpret_cast<uintptr_t>(base);
  WEAVE_EXPECT_ARG(addr % 16 == 0, "argument '" << what << "': TMA needs a 16-byte aligned base address (address mod 16 = "
                                                << addr % 16 << ")");
  WEAVE_EXPECT_ARG(rows >= 1 && cols >= 1, "argument '" << what << "': TMA tensor must be non-empty (got ["
                                                        << rows << ", " << cols << "])");
  WEAVE_EXPECT_ARG(rows < (int64_t{1} << 31) && cols < (int64_t{1} << 31),
                   "argument '" << what << "': TMA coordinates are 32-bit (got [" << rows << ", " << cols << "])");
  WEAVE_EXPECT_ARG((ld * elem) % 16 == 0 || rows == 1,
                   "argument '" << what << "': TMA needs the row pitch (leading dimension " << ld << " x "
                                << elem << " bytes) to be a multiple of 16 bytes");
  WEAVE_EXPECT_ARG(box_rows >= 1 && box_rows <= 256 && box_cols >= 1 && box_cols <= 256,
                   "internal: TMA box [" << box_rows << ", " << box_cols << "] outside 1..256");
  if (swizzle != TmaSwizzle::kNone) {
    const int64_t span = swizzle == TmaSwizzle::k128B ? 128 : 64;
    WEAVE_EXPECT_ARG(box_cols * elem <= span, "internal: a " << span << "B-swizzled TMA box row must be <= " << span
                                                             << " bytes (got " << box_cols * elem << ")");
  }
  return rows == 1 ? ((cols * elem + 15) / 16) * 16 : ld * elem;
}

static CUtensorMap encode_tiled(DType dtype, int rank, const void* base, const cuuint64_t* dims,
                                const cuuint64_t* strides, const cuuint32_t* box, TmaSwizzle swizzle) {
  cuuint32_t elem_strides[3] = {1, 1, 1};
  CUtensorMap map{};
  auto encode = driver_fn<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled", 12000);
  WEAVE_CHECK_CU(encode(&map, tma_dtype(dtype), static_cast<cuuint32_t>(rank), const_cast<void*>(base), dims,
                        strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        swizzle == TmaSwizzle::k128B  ? CU_TENSOR_MAP_SWIZZLE_128B
                        : swizzle == TmaSwizzle::k64B ? CU_TENSOR_MAP_SWIZZLE_64B
                                                      : CU_TENSOR_MAP_SWIZZLE_NONE,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return map;
}

CUtensorMap make_tma_2d(const char* what, const void* base, DType dtype, int64_t rows, int64_t cols,
                        int64_t ld, int box_rows, int box_cols, TmaSwizzle swizzle) {
  const int64_t elem = static_cast<int64_t>(dtype_bytes(dtype));
  const int64_t pitch = check_tma_matrix(what, base, elem, rows, cols, ld, box_rows, box_cols, swizzle);
  cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(pitch)};
  cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  return encode_tiled(dtype, 2, base, dims, strides, box, swizzle);
}

CUtensorMap make_tma_3d_planes(const char* what, const void* base, DType dtype, int64_t planes, int64_t rows,
                               int64_t cols, int64_t ld, int64_t plane_stride, int box_rows, int box_cols,
                               TmaSwizzle swizzle) {
  const int64_t elem = static_cast<int64_t>(dtype_bytes(dtype));
  const int64_t pitch = check_tma_matrix(what, base, elem, rows, cols, ld, box_rows, box_cols, swizzle);
  WEAVE_EXPECT_ARG(planes >= 1 && planes < (int64_t{1} << 31),
                   "argument '" << what << "': plane count must be 1 .. 2^31-1 (got " << planes << ")");
  // One plane: the plane stride is never used, but must still be a valid multiple of 16.
  const int64_t stride2 = planes == 1 ? ((pitch * rows + 15) / 16) * 16 : plane_stride * elem;
  WEAVE_EXPECT_ARG(stride2 % 16 == 0 && stride2 >= pitch * rows,
                   "argument '" << what << "': TMA plane stride " << stride2
                                << " bytes must be a multiple of 16 and cover a whole plane (" << pitch * rows
                                << " bytes)");
  cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows),
                        static_cast<cuuint64_t>(planes)};
  cuuint64_t strides[2] = {static_cast<cuuint64_t>(pitch), static_cast<cuuint64_t>(stride2)};
  cuuint32_t box[3] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows), 1};
  return encode_tiled(dtype, 3, base, dims, strides, box, swizzle);
}

}  // namespace weave::hopper
