// `weave plan --presets`: the model preset table (weave/presets.hpp) with each layer's per-rank
// shape at world 1, 2, 4 and 8. A flag of `weave plan` itself rather than a topic, as --help is:
// it prints the table when parsed and ends the command (exit 0), so no topic is needed.
#include <cstdio>

#include "cli/preset_options.hpp"
#include "cli/registry.hpp"

namespace weave::cli {
namespace {

void add_plan_presets_flag(CLI::App& plan) {
  plan.add_flag_callback(
          "--presets",
          [] {
            std::fputs(presets_listing().c_str(), stdout);
            throw CLI::Success();  // ends parsing as --help does: nothing else runs
          },
          "list the model presets (gemm-ar / gemm-ag layers of DeepSeek, Llama, Qwen; gemm-rs takes the gemm-ar ones) "
          "with their per-rank shapes at world 1, 2, 4, 8, and the decoder layers of `weave plan|bench decode`, then "
          "exit; `weave plan gemm-ar|gemm-rs|gemm-ag --preset NAME` plans one")
      ->trigger_on_parse();
}

[[maybe_unused]] const bool kRegistered = register_plan_topic("--presets", add_plan_presets_flag);

}  // namespace
}  // namespace weave::cli
