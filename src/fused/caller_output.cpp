// A fused operator's optional caller output (fused/caller_output.hpp).
#include "fused/caller_output.hpp"

#include "common/check.hpp"

namespace weave::fused {

void check_caller_output(const TensorView& out, DType dtype, int64_t rows, int64_t cols, int device,
                         const WindowHandle& window) {
  // dtype, shape, unit column stride, row stride >= cols, device: the operand rules every op uses.
  // TMA alignment is not asked (a copy engine writes out, not a TMA store): only a 16-byte base.
  expect_matrix(out, "out", MatrixRule{dtype, rows, cols, true, false, device});
  const auto addr = reinterpret_cast<uintptr_t>(out.data);
  WEAVE_EXPECT_ARG(addr % 16 == 0,
                   "argument 'out': base address must be 16-byte aligned (address mod 16 = " << addr % 16 << ")");
  const auto* lo = static_cast<const char*>(out.data);
  const char* hi = lo + out.span_bytes();
  for (int r = 0; r < window.world; ++r) {
    const char* w = window.base[r];
    if (w == nullptr) continue;  // not mapped here: no address of this device can be in it
    WEAVE_EXPECT_ARG(!(lo < w + window.bytes && w < hi),
                     "argument 'out': overlaps the op's window (rank "
                         << r << "'s, as mapped on rank " << window.rank << ", bytes " << window.bytes
                         << "): every call writes the window, so out must be memory of its own; the window's "
                            "view of the output is output(m), without a copy (got "
                         << out.describe() << " at " << out.data << ")");
  }
}

void enqueue_caller_copy(const comm::Group& g, const TensorView& out, const TensorView& src, cudaStream_t stream) {
  // The copy waits for this rank's call, which waits for its peers': where ranks share a GPU's
  // queues (the emulated world), it must not enter one ahead of a peer's call
  // (testing/emulated_world.hpp "Queues"), so every rank's call is enqueued first.
  g.enqueue_lockstep();
  const size_t esz = dtype_bytes(out.dtype);
  const size_t width = static_cast<size_t>(out.cols()) * esz;
  // A single row's stride is never used (and need not be >= cols): the row's width then.
  const size_t dpitch = out.rows() > 1 ? static_cast<size_t>(out.ld()) * esz : width;
  const size_t spitch = src.rows() > 1 ? static_cast<size_t>(src.ld()) * esz : width;
  WEAVE_CHECK_CUDA(cudaMemcpy2DAsync(out.data, dpitch, src.data, spitch, width, static_cast<size_t>(out.rows()),
                                     cudaMemcpyDeviceToDevice, stream));
}

}  // namespace weave::fused
