// e4m3 x e4m3, mxfp8 (ue8m0 1x32 / 32x32, raw scale layout) promoted per 32-wide K group -> fp32, 128x128 tile,
// 128-wide K stages, stored to a local tensor.
#include "gemm/kernel.cuh"
WEAVE_GEMM_INSTANCE_LAYOUT(sm90_gemm_e4m3_mxfp8_raw_fp32_store_128x128x128, InE4m3, 128, 128, ScaleMx32<::weave::gemm::MxLayout::kRaw>,
                           float, ::weave::ScaleMode::kMxfp8, ::weave::ScaleLayout::kRaw, ::weave::DType::kF32)
