#include "testing/gemm_operands.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>
#include <utility>

#include "common/check.hpp"
#include "weave/quant.hpp"
#include "weave/reference.hpp"

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

MnMajorScales upload_mn_major_scales(const ref::QuantMatrix& q, int device) {
  WEAVE_EXPECT_ARG(q.mode == ScaleMode::kBlockscale && static_cast<int64_t>(q.scales.size()) == q.scale_rows * q.scale_cols,
                   "upload_mn_major_scales: argument 'q' must hold blockscale scales [scale_rows, scale_cols] = ["
                       << q.scale_rows << ", " << q.scale_cols << "] (got mode " << to_string(q.mode) << ", "
                       << q.scales.size() << " scales)");
  const std::vector<float> mn = ref::mn_major_block_scales(q.scales.data(), q.scale_rows, q.scale_cols);
  MnMajorScales out;
  out.buffer = DeviceBuffer(mn.size() * sizeof(float));
  out.buffer.upload(mn.data(), out.buffer.bytes());
  out.view = TensorView{.data = out.buffer.get(), .dtype = DType::kF32, .rank = 2, .shape = {q.scale_rows, q.scale_cols},
                        .strides = {1, ref::mn_major_scale_ld(q.scale_rows)}, .device = device};
  return out;
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

namespace {

constexpr int64_t kChunkRows = 1024;  // a multiple of every scale group (128, 32)

// Runs body(chunk_index, row0, row1) over row chunks on up to hardware_concurrency threads;
// rethrows the first exception.
void for_row_chunks(int64_t rows, const std::function<void(int64_t, int64_t, int64_t)>& body) {
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  const int64_t workers =
      std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(1, chunks));
  std::vector<std::exception_ptr> errors(workers);
  auto work = [&](int64_t w) {
    try {
      for (int64_t c = w; c < chunks; c += workers)
        body(c, c * kChunkRows, std::min(rows, (c + 1) * kChunkRows));
    } catch (...) {
      errors[w] = std::current_exception();
    }
  };
  if (workers == 1) {
    work(0);
  } else {
    std::vector<std::thread> threads;
    for (int64_t w = 0; w < workers; ++w) threads.emplace_back(work, w);
    for (auto& t : threads) t.join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

std::vector<float> random_operand(uint64_t seed, int64_t rows, int64_t cols) {
  WEAVE_EXPECT_ARG(rows >= 1 && cols >= 1, "random_operand: rows and cols must be >= 1 (got "
                                               << rows << ", " << cols << ")");
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for_row_chunks(rows, [&](int64_t chunk, int64_t r0, int64_t r1) {
    ref::Random rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(chunk) + 1);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c0 = 0; c0 < cols; c0 += 128) {
        const float f = std::exp2(rng.uniform(-3.0f, 3.0f));
        for (int64_t c = c0; c < std::min(cols, c0 + 128); ++c) x[r * cols + c] = f * rng.normal();
      }
  });
  return x;
}

ref::QuantMatrix quantize_parallel(const std::vector<float>& x, int64_t rows, int64_t cols,
                                   ScaleMode mode, ref::Operand operand) {
  WEAVE_EXPECT_ARG(static_cast<int64_t>(x.size()) == rows * cols,
                   "quantize_parallel: x holds " << x.size() << " values, expected " << rows * cols);
  if (rows <= kChunkRows) return ref::quantize(x.data(), rows, cols, mode, operand);
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  std::vector<ref::QuantMatrix> parts(chunks);
  for_row_chunks(rows, [&](int64_t chunk, int64_t r0, int64_t r1) {
    parts[chunk] = ref::quantize(x.data() + r0 * cols, r1 - r0, cols, mode, operand);
  });
  ref::QuantMatrix q;
  q.rows = rows;
  q.cols = cols;
  q.mode = mode;
  q.scale_cols = parts[0].scale_cols;
  for (auto& p : parts) {
    q.e4m3.insert(q.e4m3.end(), p.e4m3.begin(), p.e4m3.end());
    q.bf16.insert(q.bf16.end(), p.bf16.begin(), p.bf16.end());
    q.scales.insert(q.scales.end(), p.scales.begin(), p.scales.end());
    q.ue8m0.insert(q.ue8m0.end(), p.ue8m0.begin(), p.ue8m0.end());
    q.scale_rows += p.scale_rows;
  }
  return q;
}

}  // namespace weave::bench
