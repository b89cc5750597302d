// What the fused operators' emulated-world tests share (test_gemm_all_gather.cu,
// test_gemm_all_reduce.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench/emulated_world.hpp"
#include "bench/gemm_operands.hpp"
#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/cuda_owned.hpp"
#include "weave/gemm.hpp"
#include "weave/quant.hpp"

namespace weave::test {

// The GemmScales a case's scale layout reads for operands `a`, `b` (uploaded with row-major
// scales by bench::upload_operand): their own, or for blockscale mn-major A's scales copied
// M-contiguous into `mn` (downloaded, rearranged by weave::ref::mn_major_block_scales, uploaded).
// References keep reading the row-major originals, so a wrong rearrangement shows.
inline GemmScales scales_in_layout(ScaleLayout layout, const bench::DeviceOperand& a, const bench::DeviceOperand& b,
                                   bench::MnMajorScales& mn) {
  if (layout != ScaleLayout::kMnMajor) return GemmScales{a.scale_view, b.scale_view};
  ref::QuantMatrix q;
  q.mode = ScaleMode::kBlockscale;
  q.scale_rows = a.scale_view.rows();
  q.scale_cols = a.scale_view.cols();
  q.scales.resize(static_cast<std::size_t>(q.scale_rows * q.scale_cols));
  a.scales.download(q.scales.data(), q.scales.size() * sizeof(float));
  mn = bench::upload_mn_major_scales(q, a.scale_view.device);
  return GemmScales{mn.view, b.scale_view};
}

template <class Mode>
std::string mode_name(Mode m) {
  return std::string(to_string(m));
}

// Whether a mode runs copy streams beside the caller's (split-ce; GemmAllGather's fused-ce).
template <class Mode>
bool uses_copy_streams(Mode mode) {
  if constexpr (requires { Mode::kFusedCe; })
    if (mode == Mode::kFusedCe) return true;
  return mode == Mode::kSplitCe;
}

// What the emulated world can run: the copy-engine modes need a copy stream per peer on every
// rank (EmulatedWorld::copy_engine_unsupported_reason); every other mode a stream per rank and its
// self-test's.
template <class Mode>
bool fits_queues(Mode mode, int world) {
  if (uses_copy_streams(mode)) return bench::EmulatedWorld::copy_engine_unsupported_reason(world).empty();
  return bench::EmulatedWorld::queue_budget_ok(2 * world);
}

// A rank's stream for the length of a test step (non-blocking, destroyed at the end).
using Stream = OwnedStream;

// Every source rank's mxfp8 A_s [m, k] (seed seed_base + 17 s + m); rank `odd`'s (-1: none) with
// every 97th scale byte set to 5, outside the range the bf16 route carries exactly.
inline std::vector<bench::DeviceOperand> mx_a_with_odd_rank(int world, int odd, int64_t m, int64_t k,
                                                            uint64_t seed_base, int dev) {
  std::vector<bench::DeviceOperand> as;
  for (int s = 0; s < world; ++s) {
    ref::QuantMatrix q = bench::quantize_parallel(bench::random_operand(seed_base + 17 * s + m, m, k), m, k,
                                                  ScaleMode::kMxfp8, ref::Operand::kA);
    if (s == odd)
      for (size_t i = 0; i < q.ue8m0.size(); i += 97) q.ue8m0[i] = 5;
    as.push_back(bench::upload_operand(q, dev));
  }
  return as;
}

// One call of `op` with every rank in step (barriers around it): its output NaN-poisoned first,
// the call, a bounded sync, check(); returns the output's first `bytes` bytes.
template <class Op>
std::vector<uint8_t> poisoned_call(comm::Group& g, Op& op, int64_t m, const TensorView& a, const TensorView& b,
                                   const GemmScales& sc, size_t bytes, cudaStream_t st) {
  g.barrier();
  WEAVE_CHECK_CUDA(cudaMemsetAsync(op.output(m).data, 0xFF, bytes, st));
  op.run(m, a, b, sc, st);
  comm::sync_stream_bounded(st, 20, "an mxfp8 call");
  op.check();
  std::vector<uint8_t> out(bytes);
  WEAVE_CHECK_CUDA(cudaMemcpy(out.data(), op.output(m).data, bytes, cudaMemcpyDeviceToHost));
  g.barrier();
  return out;
}

}  // namespace weave::test
