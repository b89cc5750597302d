// What `weave bench gemm-ag` and `weave bench ag-gemm` share as fused-suite traits: every rank ends
// with [A_0; ...; A_{W-1}] B^T, [W m, N], from one B on every rank. So a rank's output is W blocks
// of m rows, block s checked against source s's reference GEMM (copied into the expected output on
// one GPU, ncclAllGather'ed over NCCL) with a wrong count per source, the bound is
// bench::gemm_tolerance of the quant and output dtype (a gather copies bytes: nothing is summed),
// and every gathering arm equals split-lsa bit for bit (the same GEMM tiles). Each op keeps its
// arms, what its collective moves (gemm-ag: the output rows; ag-gemm: the input A and its scales)
// and its words.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <utility>
#include <vector>

#include "cli/suites/fused_suite_trait.hpp"
#include "common/check.hpp"
#include "testing/gpu_reference.hpp"

namespace weave::cli::fused_bench {

template <class Op, class Config>
class GatheredSuiteTrait : public OpSuiteTrait<Op, Config> {
 public:
  bool distinct_weights() const override { return false; }
  int blocks(int world) const override { return world; }
  bool wrong_per_source() const override { return true; }
  bool magnitudes() const override { return false; }
  void fold_reference(float* expected, float*, const float* ref_s, int s, size_t elems,
                      cudaStream_t stream) const override {
    WEAVE_CHECK_CUDA(cudaMemcpyAsync(expected + static_cast<size_t>(s) * elems, ref_s, elems * sizeof(float),
                                     cudaMemcpyDeviceToDevice, stream));
  }
  void collect_reference(float* expected, float*, const float* own_ref, size_t elems, ncclComm_t comm,
                         cudaStream_t stream) const override {
    WEAVE_CHECK_NCCL(ncclAllGather(own_ref, expected, elems, ncclFloat32, comm, stream));
  }
  bench::Tolerance tolerance(bool, bool, int) const override {
    return bench::gemm_tolerance(this->base_.quant, this->base_.out_dtype);
  }
  // A gather moves bytes: equal wherever both GEMMs are the same (not where split-lsa's takes
  // weave::Gemm's GEMV or K split at small m and a fused arm its tile).
  bool equal_to_split(const SuiteArm&, const std::string&, SuiteTile tile, SuiteTile split_tile) const override {
    return tile == split_tile;
  }
  std::string header_shape() const override {
    return fmt("n=%lld k=%lld %s -> %s", static_cast<long long>(this->base_.n), static_cast<long long>(this->base_.k),
               std::string(to_string(this->base_.quant)).c_str(), std::string(to_string(this->base_.out_dtype)).c_str());
  }
  std::string world1_note() const override { return "nothing gathered"; }
  const char* verb() const override { return "gathered"; }
  const char* k_key() const override { return "k"; }
  double busbw_factor(int world) const override { return double(world - 1) / world; }

 protected:
  GatheredSuiteTrait(Config base, std::string calibration, std::vector<int64_t> ms, std::string preset)
      : OpSuiteTrait<Op, Config>(std::move(base), std::move(calibration), std::move(ms), std::move(preset),
                                 DType::kBF16) {
    this->shape_.out = this->base_.out_dtype;
  }
};

}  // namespace weave::cli::fused_bench
