// `weave plan`'s fused-plan engine (plan_fused_engine.cpp): one run over an operator's
// FusedPlanTrait (plan_fused_trait.hpp) and the subcommand that feeds it. Pure planning: runs on
// a machine without a GPU.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>

#include "cli/plan_fused_trait.hpp"
#include "cli/registry.hpp"

namespace weave::cli::fused_plan {

// A subcommand's options: the shared ones and the operator's shape options.
template <class ShapeOptions>
struct PlanOptionsOf : FusedPlanOptions {
  ShapeOptions shape;
};

// Prints the plan of every M; the exit status: 0 planned, 1 an explicit mode this build or these
// options cannot run (printed). Bad usage throws Error(kInvalidArgument) before anything is
// printed (main() exits 2): --json first, then the trait (make_trait), then --calibration.
int run_fused_plan(const FusedPlanOptions& o, const std::function<std::unique_ptr<FusedPlanTrait>()>& make_trait);

// What a fused plan's subcommand says besides its shape options: the one-line description, the
// --sms note, what auto picks under --no-fused, what a --calibration table must match, the footer.
// An empty no_fused_auto leaves --no-fused out (an op without a fused mode), an empty
// calibration_match --calibration (an op whose config takes no table).
struct PlanHelp {
  const char* name = "";
  std::string description, sms_note, no_fused_auto, calibration_match, footer;
};
// Adds --world, --sms, --no-fused, --json, --calibration (as `help` says) and the footer.
void add_fused_plan_options(CLI::App& app, FusedPlanOptions& o, const PlanHelp& help);

// Adds `weave plan <help.name>`: Trait's shape options (Trait::add_shape_options), the shared
// ones, and a callback that runs the engine over a Trait(shape options, shared options).
template <class Trait>
void add_fused_plan(CLI::App& plan, const PlanHelp& help) {
  auto opts = std::make_shared<PlanOptionsOf<typename Trait::ShapeOptions>>();
  CLI::App* c = plan.add_subcommand(help.name, help.description);
  Trait::add_shape_options(*c, opts->shape);
  add_fused_plan_options(*c, *opts, help);
  c->callback([opts] {
    exit_code() = run_fused_plan(*opts, [&] { return std::make_unique<Trait>(opts->shape, *opts); });
  });
}

}  // namespace weave::cli::fused_plan
