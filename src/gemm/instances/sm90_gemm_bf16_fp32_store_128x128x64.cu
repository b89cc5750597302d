// bf16 x bf16 -> fp32, 128x128 tile, 64-wide K stages, stored to a local tensor.
#include "gemm/kernel.cuh"
WEAVE_GEMM_INSTANCE(sm90_gemm_bf16_fp32_store_128x128x64, InBf16, 128, 128, ScaleNone, float, ::weave::ScaleMode::kBF16,
                    ::weave::DType::kF32)
