// What `weave bench gemm-ar` and `weave bench gemm-rs` share as fused-suite traits: one
// row-parallel layer. Every rank r holds A_r [M, K_r] and its own K shard B_r [N, K_r]; what a
// rank receives is (rows of) the sum over ranks of A_q B_q^T, bf16. So the expected output is that
// sum of the ranks' reference GEMMs with the terms' magnitudes (terms may cancel), the bound is
// bench::reduced_gemm_tolerance (one more bf16 half-ulp per step where NCCL summed), and the rows
// carry K_r, --chunks and --exact-own. Each op keeps its arms, its collective and its words.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/fused_options.hpp"
#include "cli/suites/fused_suite_trait.hpp"
#include "common/check.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/reduce_reference.hpp"

namespace weave::cli::fused_bench {

template <class Op, class Config>
class RowParallelSuiteTrait : public OpSuiteTrait<Op, Config> {
 public:
  bool distinct_weights() const override { return true; }
  int blocks(int) const override { return 1; }
  bool wrong_per_source() const override { return false; }
  bool magnitudes() const override { return true; }
  void fold_reference(float* expected, float* mags, const float* ref_s, int, size_t elems,
                      cudaStream_t stream) const override {
    bench::gpu_add_term(expected, mags, ref_s, static_cast<int64_t>(elems), stream);
  }
  void collect_reference(float* expected, float* mags, const float* own_ref, size_t elems, ncclComm_t comm,
                         cudaStream_t stream) const override {
    bench::gpu_add_term(expected, mags, own_ref, static_cast<int64_t>(elems), stream);
    WEAVE_CHECK_NCCL(ncclAllReduce(expected, expected, elems, ncclFloat32, ncclSum, comm, stream));
    WEAVE_CHECK_NCCL(ncclAllReduce(mags, mags, elems, ncclFloat32, ncclSum, comm, stream));
  }
  bench::Tolerance tolerance(bool partial, bool nccl_summed, int world) const override {
    if (partial) return bench::gemm_tolerance(this->base_.quant, DType::kBF16);
    bench::Tolerance t = bench::reduced_gemm_tolerance(this->base_.quant, world);
    // An NCCL all-reduce or reduce-scatter of bf16 partials may round each of its W - 1 partial
    // sums (ring): one more bf16 half-ulp (2^-9 of the terms' magnitude) per step.
    if (nccl_summed) t.rtol += (world - 1) * std::ldexp(1.0, -9);
    return t;
  }
  std::string header_shape() const override {
    return fmt("n=%lld k=%lld (K_r, per rank) %s -> bf16", static_cast<long long>(this->base_.n),
               static_cast<long long>(this->base_.k), std::string(to_string(this->base_.quant)).c_str());
  }
  const char* k_key() const override { return "k_per_rank"; }
  const char* vs_lt_key() const override { return "ratio_vs_cublaslt"; }
  void add_row_extras(nlohmann::json& x) const override {
    x["chunks"] = this->base_.chunks;
    x["exact_own"] = this->base_.exact_own;
  }

  std::string world1_note() const override {
    return "nothing reduced; gemm-only, split-lsa and split-ce are the same GEMM";
  }
  const char* verb() const override { return "reduced"; }
  std::string world1_label() const override {
    return "world 1: one rank on one GPU, nothing reduced (gemm-only, split-lsa and split-ce are the same GEMM)";
  }

 protected:
  void add_exact_own_note(std::vector<std::string>& lines) const {
    if (this->base_.exact_own)
      lines.push_back("--exact-own: fused keeps its own term in fp32, so it is not compared bit for bit");
  }

  // The arms both operators open with, in this order: gemm-only (this rank's partial), cuBLASLt's
  // GEMM alone, weave::Gemm alone, cuBLASLt + NCCL on plain and on symmetric buffers (--devices), comm-only, split-lsa
  // and split-ce. Each trait then adds its own (decode, fused, auto, ...).
  template <class Mode>
  static void add_opening_arms(ArmList& list, int world, bool emulated, bool over_nccl,
                               const std::string& comm_only_emulated_note) {
    SuiteArm gemm_only = op_arm("gemm-only", Mode::kGemmOnly);
    gemm_only.partial = true;
    list.add(gemm_only);
    list.add({.name = "cublaslt", .kind = ArmKind::kCublasLt, .partial = true});
    list.add({.name = "weave-gemm", .kind = ArmKind::kWeaveGemm, .partial = true});
    list.add_over_nccl({{.name = "cublaslt+nccl", .kind = ArmKind::kCublasLtNccl},
                        {.name = "cublaslt+nccl-sym", .kind = ArmKind::kCublasLtNcclSym}},
                       over_nccl, emulated);
    list.add_comm_only(world, emulated, "nothing to reduce", comm_only_emulated_note);
    const std::string ce_why = emulated ? bench::EmulatedWorld::copy_engine_unsupported_reason(world) : "";
    add_split_arms(list, Mode::kSplitLsa, Mode::kSplitCe, ce_why);
  }

  // `op` names the calibration table's op: it must be for this op shape (refused before any GPU
  // work); only the auto arm reads it.
  RowParallelSuiteTrait(Config base, const char* op, const std::string& calibration, std::vector<int64_t> ms,
                        std::string preset, int world)
      : OpSuiteTrait<Op, Config>(std::move(base), calibration, std::move(ms), std::move(preset), DType::kBF16) {
    calibration_option(calibration, /*mode_is_auto=*/true, op, this->base_.quant, this->base_.scale_layout,
                       DType::kBF16, this->base_.n, this->base_.k, world);
  }
};

}  // namespace weave::cli::fused_bench
