// The multi-GPU fused tests' independent references (fused_op_world.hpp): CUDA-core GEMMs
// (gpu_reference_gemm, no code shared with weave's kernels) combined by NCCL in fp32, not by weave.
#include "fused_op_world.hpp"

#include <nccl.h>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/reduce_reference.hpp"

namespace weave::test {

namespace {

// This rank's reference term of the call (fp32 [p.m, p.n]) and its magnitude, on `st`.
void own_term(const GemmProblem& p, const bench::DeviceOperand& a, const bench::DeviceOperand& b,
              bench::DeviceBuffer& term, bench::DeviceBuffer& magnitude, cudaStream_t st) {
  const size_t elems = static_cast<size_t>(p.m * p.n);
  bench::DeviceBuffer own(elems * 4);
  bench::gpu_reference_gemm(p, a.view, b.view, GemmScales{a.scale_view, b.scale_view}, own.as<float>(), st);
  WEAVE_CHECK_CUDA(cudaMemsetAsync(term.get(), 0, term.bytes(), st));
  WEAVE_CHECK_CUDA(cudaMemsetAsync(magnitude.get(), 0, magnitude.bytes(), st));
  bench::gpu_add_term(term.as<float>(), magnitude.as<float>(), own.as<float>(), static_cast<int64_t>(elems), st);
  comm::sync_stream_bounded(st, 60, "this rank's reference GEMM");  // `own` is freed on return
}

}  // namespace

ref::Comparison all_reduced_reference(Communicator& c, const TensorView& out, const GemmProblem& p,
                                      const bench::DeviceOperand& a, const bench::DeviceOperand& b, cudaStream_t st) {
  const size_t elems = static_cast<size_t>(p.m * p.n);
  bench::DeviceBuffer sum(elems * 4), mag(elems * 4);
  own_term(p, a, b, sum, mag, st);
  WEAVE_CHECK_NCCL(ncclAllReduce(sum.get(), sum.get(), elems, ncclFloat32, ncclSum, c.nccl(), st));
  WEAVE_CHECK_NCCL(ncclAllReduce(mag.get(), mag.get(), elems, ncclFloat32, ncclSum, c.nccl(), st));
  comm::sync_stream_bounded(st, c.timeout_s() + 60, "the reference's sum over ranks (ncclAllReduce)");
  return bench::gpu_compare(out, sum.as<float>(), bench::reduced_gemm_tolerance(p.mode, c.world_size()), st,
                            mag.as<float>());
}

ref::Comparison reduce_scattered_reference(Communicator& c, const TensorView& out, const GemmProblem& p,
                                           const bench::DeviceOperand& a, const bench::DeviceOperand& b,
                                           cudaStream_t st) {
  const size_t elems = static_cast<size_t>(p.m * p.n), band = elems / static_cast<size_t>(c.world_size());
  bench::DeviceBuffer term(elems * 4), term_mag(elems * 4), sum(band * 4), mag(band * 4);
  own_term(p, a, b, term, term_mag, st);
  WEAVE_CHECK_NCCL(ncclReduceScatter(term.get(), sum.get(), band, ncclFloat32, ncclSum, c.nccl(), st));
  WEAVE_CHECK_NCCL(ncclReduceScatter(term_mag.get(), mag.get(), band, ncclFloat32, ncclSum, c.nccl(), st));
  comm::sync_stream_bounded(st, c.timeout_s() + 60, "the reference's reduce-scatter (ncclReduceScatter)");
  return bench::gpu_compare(out, sum.as<float>(), bench::reduced_gemm_tolerance(p.mode, c.world_size()), st,
                            mag.as<float>());
}

ref::Comparison gathered_reference(Communicator& c, const TensorView& out, const GemmProblem& p,
                                   const bench::DeviceOperand& a, const bench::DeviceOperand& b, cudaStream_t st) {
  const size_t elems = static_cast<size_t>(p.m * p.n);
  bench::DeviceBuffer own(elems * 4), all(elems * 4 * static_cast<size_t>(c.world_size()));
  bench::gpu_reference_gemm(p, a.view, b.view, GemmScales{a.scale_view, b.scale_view}, own.as<float>(), st);
  WEAVE_CHECK_NCCL(ncclAllGather(own.get(), all.get(), elems, ncclFloat32, c.nccl(), st));
  comm::sync_stream_bounded(st, c.timeout_s() + 60, "the reference rows of every rank (ncclAllGather)");
  return bench::gpu_compare(out, all.as<float>(), bench::gemm_tolerance(p.mode, DType::kBF16), st);
}

}  // namespace weave::test
