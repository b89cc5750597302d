// weave: the command-line tool. Subcommands: info, plan <topic>, bench [suite], selftest.
// Errors never end in a stack trace: weave::Error and CLI11 errors become one line and an exit
// status (0 ok, 1 a check failed, 2 bad usage or no GPU, 3 other error).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cli/commands.hpp"
#include "weave/device.hpp"
#include "weave/error.hpp"
#include "cli/registry.hpp"

int main(int argc, char** argv) {
  using namespace weave::cli;
  CLI::App app{
      "weave: fused GEMM + collective operators for NVIDIA Hopper (H100/H200, sm_90a).\n"
      "Subcommands measure, plan and inspect; see `weave <subcommand> --help`."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("weave 0.1.0"));

  add_info_command(app);
  CLI::App* plan = app.add_subcommand(
      "plan", "Print what an op would choose for a shape (tile, grid, split-K, transport) and "
              "which constraints an input breaks. Runs on a CPU; no GPU needed.");
  plan->require_subcommand(1);
  for (auto& [name, add] : plan_topics()) add(*plan);

  BenchOptions bench_common;
  CLI::App* bench = add_bench_command(app, bench_common);
  (void)bench;

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const weave::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return e.status() == weave::Status::kInvalidArgument || e.status() == weave::Status::kNoDevice
               ? 2
               : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weave: error: %s\n", e.what());
    return 3;
  }
  return exit_code();
}
