// TensorView: a non-owning view of a strided tensor (pointer, dtype, shape, strides in elements,
// device). It owns nothing and is cheap to copy. Validation helpers throw weave::Error with
// kInvalidArgument naming the argument and the rule it broke; they never touch the GPU.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "weave/export.hpp"
#include "weave/types.hpp"

namespace weave WEAVE_API {

inline constexpr int kHostDevice = -1;
inline constexpr int kMaxRank = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};  // in elements
  int device = kHostDevice;                 // CUDA ordinal, or kHostDevice

  // Row-major matrix [rows, cols] with leading dimension ld (>= cols).
  static TensorView matrix(void* data, DType dtype, int64_t rows, int64_t cols, int64_t ld,
                           int device);
  static TensorView matrix(void* data, DType dtype, int64_t rows, int64_t cols, int device) {
    return matrix(data, dtype, rows, cols, cols, device);
  }
  static TensorView vector(void* data, DType dtype, int64_t n, int device);

  int64_t numel() const noexcept;
  int64_t rows() const noexcept { return rank >= 1 ? shape[0] : 1; }
  int64_t cols() const noexcept { return rank >= 2 ? shape[1] : 1; }
  int64_t ld() const noexcept { return rank >= 2 ? strides[0] : 1; }
  // Bytes from data to one past the last addressable element.
  int64_t span_bytes() const noexcept;
  std::string describe() const;  // "[1024, 2048] bf16 strides [2048, 1] cuda:0"
};

// Requirements a consumer places on a 2-D operand; checked by expect_matrix.
struct MatrixRule {
  DType dtype;
  int64_t rows;
  int64_t cols;
  bool inner_contiguous = true;  // stride of the last dimension is 1 (K-contiguous operands)
  bool tma_aligned = false;      // base address and leading dimension in bytes multiples of 16
  int device = kHostDevice;      // required device; kHostDevice means "host memory"
};

// Throws kInvalidArgument: "argument 'A': <rule> (got <what>)".
void expect_matrix(const TensorView& view, const char* name, const MatrixRule& rule);
void expect_vector(const TensorView& view, const char* name, DType dtype, int64_t n, int device);

}  // namespace weave
