// A bitwise comparison of two outputs on the device that only enqueues (no host sync), so a CUDA
// graph can hold it: each replay of a captured call adds its wrong elements to a device counter
// (the fused operators' graph tests, emulated and multi-GPU). gpu_count_differing
// (testing/reduce_reference.hpp) is the synchronising form over the same kernel.
#pragma once
#include <cstddef>

#include "weave/types.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace weave::bench {

// *count += the elements whose bit patterns differ between a and b (`elems` elements of `dtype`,
// 2 or 4 bytes, both on the current device), over `blocks` blocks of 256 threads; enqueued on
// `stream`.
void gpu_add_differing(const void* a, const void* b, std::size_t elems, DType dtype, unsigned long long* count,
                       cudaStream_t stream, int blocks = 512);

}  // namespace weave::bench
