// bf16 x bf16 -> bf16, 128x256 tile, 64-wide K stages, stored to a local tensor.
#include "gemm/kernel.cuh"
WEAVE_GEMM_INSTANCE(sm90_gemm_bf16_bf16_store_128x256x64, InBf16, 128, 256, ScaleNone, __nv_bfloat16, ::weave::ScaleMode::kBF16,
                    ::weave::DType::kBF16)
