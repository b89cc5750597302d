// A consumer kernel launched with programmatic dependent launch (PDL) right after other work on a
// stream: it copies a buffer that work wrote, after griddepcontrol.wait (what
// cudaGridDependencySynchronize() compiles to), or without it as the negative control. Shared by
// weave::Gemm's PDL test (tests/gpu/test_gemm_pdl.cu) and the fused operators' multi-GPU test of a
// consumer right after run().
#pragma once
#include <cstddef>

typedef struct CUstream_st* cudaStream_t;

namespace weave::bench {

// Enqueues on `stream`, with cudaLaunchAttributeProgrammaticStreamSerialization, a copy of
// `bytes` (a multiple of 16) from src to dst by 32 blocks of 256 threads. With `wait` it first
// waits for the grid before it on the stream to complete (its writes visible); without, it may
// read src while that grid still writes it (the control: a consumer that breaks the contract).
void launch_pdl_copy(const void* src, void* dst, std::size_t bytes, bool wait, cudaStream_t stream);

}  // namespace weave::bench
