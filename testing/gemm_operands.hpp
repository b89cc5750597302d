// Device copies of GEMM operands for benchmarks and tests: the quantised matrices of the host
// reference (weave::ref::QuantMatrix) uploaded as TensorViews in the layouts weave::Gemm takes
// (include/weave/gemm.hpp), so every arm of a benchmark reads the very same bytes.
//
// Ownership: DeviceBuffer owns one cudaMalloc allocation on the device that was current when it
// was made; DeviceOperand owns its values and scales and carries views onto them. Host-side only;
// not thread-safe per object.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "weave/quant.hpp"
#include "weave/tensor.hpp"

namespace weave::bench {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);  // uninitialised; 0 bytes holds no allocation
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }
  // Synchronous host <-> device copies of the whole buffer (sizes must match: checked).
  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// One GEMM operand (A [M, K] or B [N, K]) on the device with its scales.
struct DeviceOperand {
  ScaleMode mode = ScaleMode::kBF16;
  DeviceBuffer values;     // [rows, K] bf16 or e4m3, row-major, ld = K
  DeviceBuffer scales;     // per mode (weave/gemm.hpp); empty for bf16
  TensorView view;         // onto `values`
  TensorView scale_view;   // onto `scales`; rank 0 for bf16
  std::size_t bytes() const { return values.bytes() + scales.bytes(); }
};

// Uploads a quantised matrix (synchronous) onto the current device `device`. Scale views:
//   ptpc        fp32 vector [rows]
//   blockscale  fp32 matrix [scale_rows, K/128] (A: scale_rows = M; B: ceil(N/128))
//   mxfp8       ue8m0 matrix [scale_rows, K/32], raw layout (A: M; B: ceil(N/32))
DeviceOperand upload_operand(const ref::QuantMatrix& q, int device);
// Blockscale A scales of `q` (row-major [M, K/128], as quantize makes them) uploaded M-contiguous
// for ScaleLayout::kMnMajor (weave::ref::mn_major_block_scales): the view is [M, K/128] with
// strides (1, ld), ld = M rounded up to 4.
struct MnMajorScales {
  DeviceBuffer buffer;
  TensorView view;
};
MnMajorScales upload_mn_major_scales(const ref::QuantMatrix& q, int device);
// A device-side copy of `src` with the same layout (cold-weight rotation); synchronous.
DeviceOperand clone_operand(const DeviceOperand& src);

// --- host-side generation (threaded by row chunks; deterministic for a given seed) ---

// Normal values whose magnitude varies by a factor 2^u, u uniform in [-3, 3], per (row, 128-column
// block): a scale applied to the wrong row or K block then changes the result visibly, so layout
// mistakes cannot hide behind uniform data. Chunks of rows draw from independent streams seeded
// from `seed` and the chunk index.
std::vector<float> random_operand(uint64_t seed, int64_t rows, int64_t cols);
// weave::ref::quantize over row chunks on several threads, stitched: identical to one call
// (chunks are multiples of 128 rows, so no scale block straddles two chunks).
ref::QuantMatrix quantize_parallel(const std::vector<float>& x, int64_t rows, int64_t cols,
                                   ScaleMode mode, ref::Operand operand);

// Host copy of a [rows, cols] output of dtype fp32 or bf16 as fp32 values (bf16 widened exactly),
// for comparisons against the CPU fp64 reference.
std::vector<float> download_as_f32(const TensorView& out);

}  // namespace weave::bench
