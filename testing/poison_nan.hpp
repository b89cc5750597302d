// NaN poison for outputs under test: fill a buffer before a run, so an element the run never
// wrote reads as wrong afterwards (gpu_compare counts it as never_written).
#pragma once
#include <cstddef>

#include "weave/types.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace weave::bench {

// Fill `bytes` at `ptr` with the dtype's NaN pattern (bf16 0x7FC0, fp32 0x7FC00000, e4m3 0x7F,
// ue8m0 0xFF), on `stream`. Pointer and byte count must be multiples of 4 (Error otherwise).
void poison_nan(void* ptr, std::size_t bytes, DType dtype, cudaStream_t stream);

}  // namespace weave::bench
