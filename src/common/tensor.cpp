#include "weave/tensor.hpp"

#include <sstream>

#include "common/check.hpp"

namespace weave {

TensorView TensorView::matrix(void* data, DType dtype, int64_t rows, int64_t cols, int64_t ld,
                              int device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = 2;
  v.shape = {rows, cols, 0, 0};
  v.strides = {ld, 1, 0, 0};
  v.device = device;
  return v;
}

TensorView TensorView::vector(void* data, DType dtype, int64_t n, int device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = 1;
  v.shape = {n, 0, 0, 0};
  v.strides = {1, 0, 0, 0};
  v.device = device;
  return v;
}

int64_t TensorView::numel() const noexcept {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

int64_t TensorView::span_bytes() const noexcept {
  if (numel() == 0) return 0;
  int64_t last = 0;
  for (int i = 0; i < rank; ++i) last += (shape[i] - 1) * strides[i];
  return (last + 1) * static_cast<int64_t>(dtype_bytes(dtype));
}

std::string TensorView::describe() const {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << shape[i];
  os << "] " << to_string(dtype) << " strides [";
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << strides[i];
  os << "] " << (device == kHostDevice ? std::string("host") : "cuda:" + std::to_string(device));
  return os.str();
}

static std::string where(int device) {
  return device == kHostDevice ? std::string("host memory") : "cuda:" + std::to_string(device);
}

void expect_matrix(const TensorView& v, const char* name, const MatrixRule& rule) {
  WEAVE_EXPECT_ARG(v.rank == 2, "argument '" << name << "': must be a 2-D matrix (got rank "
                                             << v.rank << ": " << v.describe() << ")");
  WEAVE_EXPECT_ARG(v.data != nullptr || v.numel() == 0,
                   "argument '" << name << "': data pointer is null");
  WEAVE_EXPECT_ARG(v.dtype == rule.dtype, "argument '" << name << "': dtype must be "
                                                       << to_string(rule.dtype) << " (got "
                                                       << to_string(v.dtype) << ")");
  WEAVE_EXPECT_ARG(v.shape[0] == rule.rows && v.shape[1] == rule.cols,
                   "argument '" << name << "': shape must be [" << rule.rows << ", " << rule.cols
                                << "] (got [" << v.shape[0] << ", " << v.shape[1] << "])");
  WEAVE_EXPECT_ARG(v.shape[0] >= 0 && v.shape[1] >= 0 && v.strides[0] >= 0 && v.strides[1] >= 0,
                   "argument '" << name << "': shape and strides must be non-negative ("
                                << v.describe() << ")");
  if (rule.inner_contiguous) {
    WEAVE_EXPECT_ARG(v.strides[1] == 1 || v.shape[1] <= 1,
                     "argument '" << name << "': last dimension must be contiguous (stride 1; got "
                                  << v.strides[1] << ")");
    WEAVE_EXPECT_ARG(v.strides[0] >= v.shape[1] || v.shape[0] <= 1,
                     "argument '" << name << "': leading dimension " << v.strides[0]
                                  << " must be >= the number of columns " << v.shape[1]
                                  << " (rows would overlap)");
  }
  if (rule.tma_aligned) {
    const auto addr = reinterpret_cast<uintptr_t>(v.data);
    WEAVE_EXPECT_ARG(addr % 16 == 0, "argument '" << name
                                                  << "': base address must be 16-byte aligned "
                                                     "for TMA (address mod 16 = "
                                                  << addr % 16 << ")");
    const int64_t ld_bytes = v.strides[0] * static_cast<int64_t>(dtype_bytes(v.dtype));
    WEAVE_EXPECT_ARG(v.shape[0] <= 1 || ld_bytes % 16 == 0,
                     "argument '" << name << "': leading dimension in bytes (" << ld_bytes
                                  << ") must be a multiple of 16 for TMA");
  }
  WEAVE_EXPECT_ARG(v.device == rule.device, "argument '" << name << "': must live in "
                                                         << where(rule.device) << " (got "
                                                         << where(v.device) << ")");
}

void expect_vector(const TensorView& v, const char* name, DType dtype, int64_t n, int device) {
  WEAVE_EXPECT_ARG(v.rank == 1, "argument '" << name << "': must be a 1-D vector (got rank "
                                             << v.rank << ")");
  WEAVE_EXPECT_ARG(v.data != nullptr || n == 0, "argument '" << name << "': data pointer is null");
  WEAVE_EXPECT_ARG(v.dtype == dtype, "argument '" << name << "': dtype must be "
                                                  << to_string(dtype) << " (got "
                                                  << to_string(v.dtype) << ")");
  WEAVE_EXPECT_ARG(v.shape[0] == n, "argument '" << name << "': length must be " << n << " (got "
                                                 << v.shape[0] << ")");
  WEAVE_EXPECT_ARG(v.strides[0] == 1, "argument '" << name << "': must be contiguous (stride 1; got "
                                                   << v.strides[0] << ")");
  WEAVE_EXPECT_ARG(v.device == device, "argument '" << name << "': must live in " << where(device)
                                                    << " (got " << where(v.device) << ")");
}

}  // namespace weave
