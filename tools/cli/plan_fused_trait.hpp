// What a fused operator tells `weave plan`'s fused-plan engine (plan_fused_engine.hpp), the shape
// of the bench side's fused_suite_trait.hpp: the engine owns the options, the checks, the per-M
// loop, the header, the table, the JSON and the exit status; an operator is one FusedPlanTrait
// (its shape and config, how to call its public pure planner, its columns and its words).
// `weave plan gemm-ag`, `gemm-ar`, `gemm-rs` and `ag-gemm` are such traits (plan_gemm_ag.cpp,
// plan_gemm_ar.cpp, plan_gemm_rs.cpp, plan_ag_gemm.cpp; gemm-ar and gemm-rs share
// plan_row_parallel_trait.hpp). An op without a fused mode (ag-gemm) says so (no_fused_mode).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weave/fused_plan.hpp"
#include "weave/types.hpp"

namespace weave::cli::fused_plan {

// The options every fused plan has besides its shape.
struct FusedPlanOptions {
  int world = 2;
  int sms = 132;
  bool no_fused = false;
  std::string json_path;
  std::string calibration;  // a `weave bench <op> --calibrate` table auto consults
};

// One of a trait's columns, printed between grid and gemm_us: an integer right-aligned in
// `width` (as human_bytes where `bytes`), and `key` in the JSON rows. A `tiled` column describes
// the tiled kernels' schedule: "-" (and no JSON key) on a row the decode GEMV runs.
struct PlanColumn {
  const char* header;
  int width;
  const char* key;
  bool bytes = false;
  bool tiled = false;
};

// One M's plan as the engine prints it: the fields every fused plan has, and one value per
// trait column (in columns() order).
struct PlanRow {
  int block_m = 0, block_n = 0;
  std::int64_t tiles = 0;
  double waves = 0;
  int grid = 0;
  std::vector<std::int64_t> extras;
  double model_gemm_us = 0, model_comm_us = 0, model_split_us = 0, model_fused_us = 0;
  std::string mode, reason;
  // The decode GEMV runs this M (GemmAllReduce's decode and decode-fused): the tile, the tiled
  // columns and the fused kernel's modelled time do not describe it.
  bool gemv = false;
};
// The shared fields of a public plan (GemmAllGatherPlan, GemmAllReducePlan, AllGatherGemmPlan: no
// fused time where the op has no fused mode) and the trait's values.
template <class Plan>
PlanRow plan_row(const Plan& p, std::vector<std::int64_t> extras) {
  PlanRow row{.block_m = p.block_m, .block_n = p.block_n, .tiles = p.tiles, .waves = p.waves, .grid = p.grid,
              .extras = std::move(extras), .model_gemm_us = p.model_gemm_us, .model_comm_us = p.model_comm_us,
              .model_split_us = p.model_split_us, .mode = std::string(to_string(p.mode)), .reason = p.reason};
  if constexpr (requires { p.model_fused_us; }) row.model_fused_us = p.model_fused_us;
  return row;
}

// What the planner's model assumes: the op's fused::*_rates (GagRates, GarRates) by plan_rates.
struct PlanRates {
  double gemm_tflops = 0, link_gbps = 0, comm_latency_us = 0;
};
template <class Rates>
PlanRates plan_rates(const Rates& r) {
  return {.gemm_tflops = r.gemm_tflops, .link_gbps = r.link_gbps, .comm_latency_us = r.comm_latency_us};
}

// An operator's part of `weave plan`. Built from its shape options and the shared ones (which
// may throw Error(kInvalidArgument) naming an option: exit 2 before anything is printed).
class FusedPlanTrait {
 public:
  virtual ~FusedPlanTrait() = default;

  // The op's shape after --preset, its mode as typed, and whether that mode is auto or an
  // explicit one that needs the fused kernel.
  struct Shape {
    std::int64_t n = 0, k = 0, m_max = 0;
    std::vector<std::int64_t> ms;
    ScaleMode quant = ScaleMode::kBF16;
    ScaleLayout layout = ScaleLayout::kRaw;
    DType out = DType::kBF16;
    std::string preset;  // "" when none
    std::string mode;
    bool mode_is_auto = false, mode_needs_fused = false;
  };
  virtual const char* name() const = 0;  // "gemm-ag"
  virtual const Shape& shape() const = 0;

  // The fused kernels' names, one per tile the planner may choose ("" where this build has none),
  // the model's rates, the window.
  virtual std::string fused_kernel() const = 0;
  // "" for an op with a fused mode; else why it has none (the header says so, the fused_us column
  // shows "-", the JSON rows have no model_fused_us, and the subcommand has no --no-fused).
  virtual std::string no_fused_mode() const { return ""; }
  virtual PlanRates rates() const = 0;
  virtual std::size_t window_bytes() const = 0;
  // The public pure planner at m (the calibration, if any, read by the planner itself).
  virtual PlanRow plan(std::int64_t m, const FusedPlanMachine& machine) const = 0;
  virtual const std::vector<PlanColumn>& columns() const = 0;

  // Words: the header's note after k ("" or " (K_r, per rank)") and its tail (", chunks 4");
  // where the rates come from ("fused::gag_rates") and the collective's name ("all-gather");
  // what the window holds; why an explicit fused mode has no kernel; lines above "# model only";
  // the JSON key of k and the document's extra fields.
  virtual const char* k_note() const { return ""; }
  virtual std::string header_tail() const { return ""; }
  virtual const char* rates_source() const = 0;
  virtual const char* collective() const = 0;
  virtual std::string window_contents() const = 0;
  virtual std::string no_kernel_reason() const = 0;
  virtual std::vector<std::string> table_notes() const { return {}; }
  virtual const char* k_key() const { return "k"; }
  virtual void add_doc_extras(nlohmann::json&) const {}
};

// What every operator's trait holds: the shape options with --preset filled in (shapes_of), the
// op's config of them (config_of, which throws naming the option of every broken rule), the same
// config with --calibration for the planner (where the config takes a table), the world, and the
// engine's Shape (out bf16 and no mode needing the fused kernel until the operator's constructor
// says otherwise).
template <class Options, class Config>
class OpPlanTrait : public FusedPlanTrait {
 public:
  using ShapeOptions = Options;
  const Shape& shape() const override { return shape_; }

 protected:
  using ShapesOf = std::vector<Options> (*)(const Options&, int world);
  using ConfigOf = Config (*)(const Options&, int world);
  OpPlanTrait(const Options& typed, const FusedPlanOptions& o, ShapesOf shapes_of, ConfigOf config_of)
      : world_(o.world), options_(shapes_of(typed, o.world).front()), cfg_(config_of(options_, o.world)), planned_(cfg_) {
    // The public planner loads the (already checked) calibration itself.
    if constexpr (requires { planned_.calibration; }) planned_.calibration = o.calibration;
    using Mode = decltype(Config::mode);
    shape_ = {.n = cfg_.n, .k = cfg_.k, .m_max = cfg_.m_max, .ms = options_.ms, .quant = cfg_.quant,
              .layout = cfg_.scale_layout, .preset = options_.preset, .mode = std::string(to_string(cfg_.mode)),
              .mode_is_auto = cfg_.mode == Mode::kAuto};
  }
  int world_;
  Options options_;
  Config cfg_, planned_;
  Shape shape_;
};

}  // namespace weave::cli::fused_plan
