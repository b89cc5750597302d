// A fused operator's optional caller output (GemmAllGather, GemmAllReduce): the rules run() checks
// before any GPU work, and the copy it enqueues after the call on the caller's stream. The output
// itself lives in the op's window (output(m), valid until the next call); a caller that wants to
// keep it passes a buffer of its own and gets a stream-ordered copy. Host only.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "comm/group.hpp"
#include "weave/tensor.hpp"
#include "weave/window_handle.hpp"

namespace weave::fused {

// `out` must be [rows, cols] of `dtype` on `device`, unit column stride, row stride >= cols, a
// 16-byte aligned base, and share no byte with any rank's window as mapped here (`window`: every
// call writes the window, peers too). Error(kInvalidArgument) "argument 'out': <rule> (got ...)"
// otherwise. Touches no GPU.
void check_caller_output(const TensorView& out, DType dtype, int64_t rows, int64_t cols, int device,
                         const WindowHandle& window);

// Enqueues out <- src on `stream` after the call the rank just enqueued there, both [rows, cols] of
// one dtype with their own row strides: one cudaMemcpy2DAsync (no host sync, graph-capturable).
// `out` checked by check_caller_output. Goes through g.enqueue_lockstep() first (a no-op over NCCL;
// in the emulated world every rank passes out to the same calls or to none).
void enqueue_caller_copy(const comm::Group& g, const TensorView& out, const TensorView& src, cudaStream_t stream);

}  // namespace weave::fused
