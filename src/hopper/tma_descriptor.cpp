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

CUtensorMap make_tma_2d(const char* what, const void* base, DType dtype, int64_t rows, int64_t cols,
                        int64_t ld, int box_rows, int box_cols, TmaSwizzle swizzle) {
  const int64_t elem = static_cast<int64_t>(dtype_bytes(dtype));
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
  if (swizzle == TmaSwizzle::k128B)
    WEAVE_EXPECT_ARG(box_cols * elem <= 128, "internal: a 128B-swizzled TMA box row must be <= 128 bytes (got "
                                                 << box_cols * elem << ")");

  cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  // Stride of dimension 1 in bytes; a single-row tensor still needs a valid multiple of 16.
  const int64_t pitch = rows == 1 ? ((cols * elem + 15) / 16) * 16 : ld * elem;
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(pitch)};
  cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  cuuint32_t elem_strides[2] = {1, 1};
  CUtensorMap map{};
  auto encode = driver_fn<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled", 12000);
  WEAVE_CHECK_CU(encode(&map, tma_dtype(dtype), 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE,
                        swizzle == TmaSwizzle::k128B ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return map;
}

}  // namespace weave::hopper
