// e4m3 x e4m3, per-row x per-column scales in the epilogue -> bf16, 256x128 tile, 128-wide K stages, stored to a local tensor.
#include "gemm/kernel.cuh"
WEAVE_GEMM_INSTANCE(sm90_gemm_e4m3_ptpc_bf16_store_256x128x128, InE4m3, 256, 128, ScalePerRowCol, __nv_bfloat16, ::weave::ScaleMode::kPtpc,
                    ::weave::DType::kBF16)
