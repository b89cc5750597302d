// Owning handles for short-lived device memory and streams in host code of the library (self-tests,
// setup steps): freed on every path, exceptions included. Errors on creation raise weave::Error.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "common/check.hpp"

namespace weave {

struct OwnedDeviceMemory {
  void* p = nullptr;
  explicit OwnedDeviceMemory(std::size_t n) { WEAVE_CHECK_CUDA(cudaMalloc(&p, n == 0 ? 16 : n)); }
  ~OwnedDeviceMemory() { cudaFree(p); }
  OwnedDeviceMemory(const OwnedDeviceMemory&) = delete;
  OwnedDeviceMemory& operator=(const OwnedDeviceMemory&) = delete;
};

struct OwnedStream {
  cudaStream_t s = nullptr;
  OwnedStream() { WEAVE_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~OwnedStream() { cudaStreamDestroy(s); }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
};

}  // namespace weave
