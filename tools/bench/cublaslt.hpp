// cuBLASLt as the baseline (and independent second opinion) for weave::Gemm:
//   C[M,N] = A[M,K] * B[N,K]^T, fp32 accumulation, A and B K-contiguous, C row-major,
// in the same modes and with the same operands and scale tensors that weave::Gemm takes.
//
// Mapping onto cuBLASLt's column-major convention. A row-major [R, C] matrix is the column-major
// [C, R] matrix with the same bytes, so we ask cuBLASLt for C^T = B * A^T:
//   cuBLASLt A := our B   (K x N column-major, lda = ld(B)), TRANSA = T  -> op(A) is N x K
//   cuBLASLt B := our A   (K x M column-major, ldb = ld(A)), TRANSB = N  -> op(B) is K x M
//   cuBLASLt D := our C   (N x M column-major, ldd = ld(C)); cuBLASLt m = N, n = M, k = K.
// This is also the only fp8 layout Hopper's cuBLASLt runs ("TN").
//
// Scales (cuBLAS manual 3.1.4.3 and 3.1.4.5.1; our layouts in weave/gemm.hpp):
//   ptpc        OUTER_VEC_32F on both: cuBLASLt scale_A = our B scales [N], scale_B = our A
//               scales [M]. Used as they are.
//   blockscale  cuBLASLt A (our weights) BLK128x128_32F, cuBLASLt B (our activations)
//               VEC128_32F (the pair A=BLK, B=VEC is supported; BLK on both is not).
//               - VEC128 wants the scales "N-major" for cuBLASLt's B: [L][M] with M contiguous,
//                 L = K/128. Ours are [M, L] row-major (K-block contiguous): we TRANSPOSE them.
//               - BLK128x128 wants them K-major with a column stride that is a multiple of 4:
//                 [ceil(N/128)][L4], L4 = round_up(L, 4). Ours are [ceil(N/128), L] row-major:
//                 we copy them with the leading dimension padded to L4 (pad values 0, unread).
//               - The manual requires cuBLASLt's m and n (our N and M) to be multiples of 4:
//                 `supports` refuses other shapes (kUnsupported) instead of padding behind the
//                 caller's back.
//               The conversion is done once per scale set by `prepare_scales` (outside any timed
//               region). Note for readers of benchmark rows: in a real forward pass the
//               activation scales change every call, so cuBLASLt would pay this transpose per
//               call; the baseline as measured here does not.
//   mxfp8       no cuBLASLt mode on Hopper (VEC32_UE8M0 is Blackwell-only): refused.
//
// Verbs: `supports` (pure), the constructor (handle, descriptors, one heuristic query with a
// 32 MiB workspace, the workspace itself), `prepare_scales` (setup, synchronous), `run`
// (enqueues one cublasLtMatmul: no allocation, no sync, graph-capturable). Every failure is a
// weave::Error whose message names the mode and shape. Thread scope: one object per thread;
// `run` updates the descriptor's scale pointers, so it is not const.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "weave/gemm.hpp"
#include "weave/tensor.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace weave::bench {

// Scale tensors in the order cuBLASLt reads them, for one (A scales, B scales) pair. Either
// borrowed (ptpc: the caller's vectors) or owned (blockscale: converted copies). Cheap to copy
// (shared ownership of the converted buffers).
struct CublasLtScales {
  const float* lt_a = nullptr;  // cuBLASLt's A = our B (weights)
  const float* lt_b = nullptr;  // cuBLASLt's B = our A (activations)
  std::shared_ptr<void> owner;  // keeps converted buffers alive; empty when borrowed
};

struct CublasLtOptions {
  bool fast_accum = false;                     // CUBLASLT_MATMUL_DESC_FAST_ACCUM (ptpc only)
  std::size_t workspace_bytes = 32u << 20;     // heuristic limit and the workspace we allocate
};

class CublasLtGemm {
 public:
  // "" if cuBLASLt on Hopper can run the problem in this wrapper, else the reason.
  static std::string supports(const GemmProblem& problem);

  // Throws kUnsupported (with the reason) when `supports` refuses or the heuristic finds no
  // algorithm; kCublasError / kCudaError on library failures. `device` must be current.
  // Leading dimensions default to the dense ones (K, K, N).
  CublasLtGemm(const GemmProblem& problem, int device, CublasLtOptions options = {},
               int64_t lda = 0, int64_t ldb = 0, int64_t ldc = 0);
  ~CublasLtGemm();
  CublasLtGemm(CublasLtGemm&&) noexcept;
  CublasLtGemm& operator=(CublasLtGemm&&) noexcept;

  // Converts weave's scale layouts into cuBLASLt's (see the header comment); enqueues on
  // `stream` and synchronises it. bf16: returns an empty set.
  CublasLtScales prepare_scales(const GemmScales& scales, cudaStream_t stream) const;

  // Enqueues C = A * B^T. a [M, K], b [N, K], c [M, N] device views matching the problem and the
  // leading dimensions given at construction (checked on the host, cheaply).
  void run(const TensorView& a, const TensorView& b, const CublasLtScales& scales,
           const TensorView& c, cudaStream_t stream);

  const GemmProblem& problem() const;
  // "cublaslt bf16 8192x5120x2048 ->bf16 algo 66 tile 20 stages 8 waves 1.2 ws 0 B"
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weave::bench
