// e4m3 x e4m3, 1x128 / 128x128 block scales promoted per K block -> bf16, 256x128 tile, 128-wide K stages, stored to a local tensor.
#include "gemm/kernel.cuh"
WEAVE_GEMM_INSTANCE(sm90_gemm_e4m3_blockscale_bf16_store_256x128x128, InE4m3, 256, 128, ScaleBlockwise, __nv_bfloat16, ::weave::ScaleMode::kBlockscale,
                    ::weave::DType::kBF16)
