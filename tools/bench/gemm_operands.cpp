#include "bench/gemm_operands.hpp"

#include <cstring>
#include <utility>

#include "common/check.hpp"

namespace weave::bench {

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes > 0) WEAVE_CHECK_CUDA(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  WEAVE_EXPECT_ARG(bytes == bytes_, "DeviceBuffer::upload: " << bytes << " bytes into a buffer of "
                                                             << bytes_);
  if (bytes) WEAVE_CHECK_CUDA(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(void* host, std::size_t bytes) const {
  WEAVE_EXPECT_ARG(bytes == bytes_, "DeviceBuffer::download: " << bytes
                                                               << " bytes from a buffer of " << bytes_);
  if (bytes) WEAVE_CHECK_CUDA(cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost));
}

DeviceOperand upload_operand(const ref::QuantMatrix& q, int device) {
  DeviceOperand d;
  d.mode = q.mode;
  const int64_t elems = q.rows * q.cols;
  if (q.mode == ScaleMode::kBF16) {
    WEAVE_EXPECT_ARG(static_cast<int64_t>(q.bf16.size()) == elems,
                     "upload_operand: bf16 matrix holds " << q.bf16.size() << " values, expected "
                                                          << elems);
    d.values = DeviceBuffer(elems * sizeof(uint16_t));
    d.values.upload(q.bf16.data(), d.values.bytes());
    d.view = TensorView::matrix(d.values.get(), DType::kBF16, q.rows, q.cols, device);
    return d;
  }
  WEAVE_EXPECT_ARG(static_cast<int64_t>(q.e4m3.size()) == elems,
                   "upload_operand: e4m3 matrix holds " << q.e4m3.size() << " values, expected "
                                                        << elems);
  d.values = DeviceBuffer(elems);
  d.values.upload(q.e4m3.data(), d.values.bytes());
  d.view = TensorView::matrix(d.values.get(), DType::kE4M3, q.rows, q.cols, device);
  switch (q.mode) {
    case ScaleMode::kPtpc:
      WEAVE_EXPECT_ARG(static_cast<int64_t>(q.scales.size()) == q.rows,
                       "upload_operand: ptpc needs one scale per row (" << q.rows << "), got "
                                                                        << q.scales.size());
      d.scales = DeviceBuffer(q.scales.size() * sizeof(float));
      d.scales.upload(q.scales.data(), d.scales.bytes());
      d.scale_view = TensorView::vector(d.scales.get(), DType::kF32, q.rows, device);
      break;
    case ScaleMode::kBlockscale:
      WEAVE_EXPECT_ARG(static_cast<int64_t>(q.scales.size()) == q.scale_rows * q.scale_cols,
                       "upload_operand: blockscale scale tensor [" << q.scale_rows << ", "
                                                                   << q.scale_cols << "] holds "
                                                                   << q.scales.size());
      d.scales = DeviceBuffer(q.scales.size() * sizeof(float));
      d.scales.upload(q.scales.data(), d.scales.bytes());
      d.scale_view = TensorView::matrix(d.scales.get(), DType::kF32, q.scale_rows, q.scale_cols,
                                        device);
      break;
    case ScaleMode::kMxfp8:
      WEAVE_EXPECT_ARG(static_cast<int64_t>(q.ue8m0.size()) == q.scale_rows * q.scale_cols,
                       "upload_operand: mxfp8 scale tensor [" << q.scale_rows << ", "
                                                              << q.scale_cols << "] holds "
                                                              << q.ue8m0.size());
      d.scales = DeviceBuffer(q.ue8m0.size());
      d.scales.upload(q.ue8m0.data(), d.scales.bytes());
      d.scale_view = TensorView::matrix(d.scales.get(), DType::kUE8M0, q.scale_rows,
                                        q.scale_cols, device);
      break;
    case ScaleMode::kBF16:
      break;
  }
  return d;
}

namespace {
TensorView rebase(TensorView v, void* data) {
  v.data = data;
  return v;
}
}  // namespace

DeviceOperand clone_operand(const DeviceOperand& src) {
  DeviceOperand d;
  d.mode = src.mode;
  d.values = DeviceBuffer(src.values.bytes());
  d.scales = DeviceBuffer(src.scales.bytes());
  if (src.values.bytes())
    WEAVE_CHECK_CUDA(cudaMemcpy(d.values.get(), src.values.get(), src.values.bytes(),
                                cudaMemcpyDeviceToDevice));
  if (src.scales.bytes())
    WEAVE_CHECK_CUDA(cudaMemcpy(d.scales.get(), src.scales.get(), src.scales.bytes(),
                                cudaMemcpyDeviceToDevice));
  d.view = rebase(src.view, d.values.get());
  d.scale_view = src.scale_view.rank ? rebase(src.scale_view, d.scales.get()) : src.scale_view;
  return d;
}

std::vector<float> download_as_f32(const TensorView& out) {
  WEAVE_EXPECT_ARG(out.rank == 2 && (out.dtype == DType::kF32 || out.dtype == DType::kBF16),
                   "download_as_f32: expects a 2-D fp32 or bf16 tensor, got " << out.describe());
  const int64_t rows = out.rows(), cols = out.cols(), ld = out.ld();
  const std::size_t esize = dtype_bytes(out.dtype);
  std::vector<unsigned char> raw(static_cast<std::size_t>(rows * cols) * esize);
  WEAVE_CHECK_CUDA(cudaMemcpy2D(raw.data(), cols * esize, out.data, ld * esize, cols * esize, rows,
                                cudaMemcpyDeviceToHost));
  std::vector<float> f(static_cast<std::size_t>(rows * cols));
  if (out.dtype == DType::kF32) {
    std::memcpy(f.data(), raw.data(), raw.size());
  } else {
    for (std::size_t i = 0; i < f.size(); ++i) {
      uint32_t bits = uint32_t(raw[2 * i]) | (uint32_t(raw[2 * i + 1]) << 8);
      bits <<= 16;
      std::memcpy(&f[i], &bits, 4);
    }
  }
  return f;
}

}  // namespace weave::bench
