// e4m3 x e4m3, per-row x per-column scales in the epilogue -> fp32, 256x128 tile, 128-wide K stages, stored to a local tensor.
#include "gemm/kernel.cuh"
WEAVE_GEMM_INSTANCE(sm90_gemm_e4m3_ptpc_fp32_store_256x128x128, InE4m3, 256, 128, ScalePerRowCol, float, ::weave::ScaleMode::kPtpc,
                    ::weave::DType::kF32)
