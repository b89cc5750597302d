// What `weave plan gemm-ar` and `weave plan gemm-rs` share as fused-plan traits: one row-parallel
// layer, so K is this rank's shard K_r, --chunks and --exact-own shape the fused schedule, and
// both run GemmAllReduce's kernels and model (fused::gar_rates). Each op keeps its columns, its
// collective's words and its planner call.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "cli/plan_fused_trait.hpp"
#include "fused/all_reduce/plan.hpp"

namespace weave::cli::fused_plan {

template <class Options, class Config>
class RowParallelPlanTrait : public OpPlanTrait<Options, Config> {
 public:
  PlanRates rates() const override { return plan_rates(fused::gar_rates(this->cfg_.quant)); }
  const char* rates_source() const override { return "fused::gar_rates"; }
  const char* k_note() const override { return " (K_r, per rank)"; }
  std::string header_tail() const override {
    const Config& c = this->cfg_;
    return ", chunks " + (c.chunks > 0 ? std::to_string(c.chunks) : std::string("planner's")) +
           (c.exact_own ? ", exact own term (fused not bitwise equal to split)" : "");
  }
  std::string no_kernel_reason() const override {
    return "no fused kernel for " + std::string(to_string(this->cfg_.quant)) + " in this build";
  }
  const char* k_key() const override { return "k_per_rank"; }
  void add_doc_extras(nlohmann::json& doc) const override {
    doc["chunks"] = this->cfg_.chunks;
    doc["exact_own"] = this->cfg_.exact_own;
  }

 protected:
  using OpPlanTrait<Options, Config>::OpPlanTrait;
};

}  // namespace weave::cli::fused_plan
