// `weave bench [suite]`. A bare `weave bench` runs every default suite on the visible GPUs; where
// there is no Hopper GPU it says so and exits 2 (no crash, no stack trace).
#include <cstdio>

#include "bench/harness.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "weave/device.hpp"
#include "weave/error.hpp"

namespace weave::cli {

void check_bench_options(const BenchOptions& options) {
  check_output_file("--json", options.json_path);
  check_device_list("--devices", options.devices);
}

std::vector<int> bench_devices(const BenchOptions& options) {
  const std::string why = no_gpu_reason();
  if (!why.empty()) throw Error(Status::kNoDevice, "", "", why);
  std::vector<int> out;
  if (!options.devices.empty()) {
    for (int d : options.devices) {
      require_hopper(d);
      out.push_back(d);
    }
    return out;
  }
  for (const auto& d : list_devices())
    if (d.is_hopper()) out.push_back(d.ordinal);
  return out;
}

std::string gate_idle(const BenchOptions& options, const std::vector<int>& devices) {
  if (options.no_idle_gate) return "idle gate skipped (--no-idle-gate)";
  bench::IdleGate gate;
  std::string report;
  bool idle = gate.wait_idle(devices, options.idle_threshold, 5, options.idle_wait_s, &report);
  std::fprintf(stderr, "weave bench: %s%s\n", report.c_str(),
               idle ? "" : " -- measuring anyway; rows are flagged busy");
  return (idle ? "" : "BUSY: ") + report;
}

CLI::App* add_bench_command(CLI::App& app, BenchOptions& common) {
  std::string help =
      "Measure weave against the strongest baseline in the same run (CUDA graphs, cold weights, "
      "alternating arms, NaN-poisoned outputs validated per row). With no suite, runs the default "
      "suites on all visible GPUs. Suites:";
  for (const auto& s : bench_suites()) help += "\n  " + s.name + ": " + s.help;
  auto* bench = app.add_subcommand("bench", help);
  bench->fallthrough();  // `weave bench copy -i 30` reaches the shared options too
  add_common_bench_options(*bench, common);
  for (auto& s : bench_suites()) s.add(*bench, common);
  bench->callback([bench, &common] {
    if (!bench->get_subcommands().empty()) return;  // a suite ran
    check_bench_options(common);
    bench_devices(common);                          // no GPU -> kNoDevice -> exit 2
    int worst = 0;
    for (auto& s : bench_suites()) {
      if (!s.run_default) continue;
      std::fprintf(stderr, "weave bench: running suite '%s'\n", s.name.c_str());
      worst = std::max(worst, s.run_default(common));
    }
    exit_code() = worst;
  });
  return bench;
}

}  // namespace weave::cli
