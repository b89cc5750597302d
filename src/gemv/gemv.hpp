// Decode GEMV (M <= 32): C[M,N] = A[M,K] * B[N,K]^T, memory-bound on the weight read B.
// Internal interface between weave::Gemm (which plans and validates) and the GEMV kernels.
// Operands have already been validated by Gemm; scales are read in their raw layout.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "weave/gemm.hpp"

namespace weave::detail {

inline constexpr int64_t kGemvMaxM = 32;

struct GemvArgs {
  const void* a = nullptr;        // [M, K] bf16 or e4m3, row stride lda (elements)
  const void* b = nullptr;        // [N, K] same dtype, row stride ldb
  const void* scale_a = nullptr;  // per mode (weave/gemm.hpp); raw layout
  const void* scale_b = nullptr;
  void* c = nullptr;              // [M, N] out dtype, row stride ldc
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  ScaleMode mode = ScaleMode::kBF16;
  DType out_dtype = DType::kBF16;
};

// "" if the GEMV path implements this problem (M <= 32, mode, layout raw, out dtype), else why not.
std::string gemv_unsupported_reason(const GemmProblem& problem);
// Enqueues the GEMV on `stream`; no allocation, no sync, graph-capturable.
void gemv_launch(const GemvArgs& args, int num_sms, cudaStream_t stream);

}  // namespace weave::detail
