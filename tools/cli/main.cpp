// weave: the command-line tool. Subcommands: info, plan <topic>, bench [suite], selftest.
// Errors never end in a stack trace: weave::Error and CLI11 errors become one line and an exit
// status (0 ok, 1 a check failed, 2 bad usage or no GPU, 3 other error). A usage error names the
// option (or the unknown subcommand) and the rule, and comes before any GPU work.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/registry.hpp"
#include "weave/error.hpp"
#include "weave/version.hpp"

int main(int argc, char** argv) {
  using namespace weave::cli;
  // `weave bench gemm-ag|gemm-ar|gemm-rs|ag-gemm --emulate-world W` runs W ranks' streams on one GPU;
  // they need their own hardware queues (testing/emulated_world.hpp), which CUDA reads from the
  // environment when it starts. Nothing has touched CUDA yet here; a value the user set is kept.
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]).rfind("--emulate-world", 0) == 0) {
      setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
      break;
    }
  CLI::App app{
      "weave: fused GEMM + collective operators for NVIDIA Hopper (H100/H200, sm_90a).\n"
      "Subcommands measure, plan and inspect; see `weave <subcommand> --help`."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("weave ") + WEAVE_VERSION_STRING);

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
    if (e.get_exit_code() != 0) {
      const std::string unknown = unknown_subcommand_message(app);
      if (!unknown.empty()) {
        std::fprintf(stderr, "%s\nRun with --help for more information.\n", unknown.c_str());
        return 2;
      }
    }
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const weave::Error& e) {
    // A usage error is the user's input, not a place in weave's sources: no location.
    if (e.status() == weave::Status::kInvalidArgument || e.status() == weave::Status::kNoDevice) {
      std::fprintf(stderr, "weave: %s: %s\n", weave::to_string(e.status()), e.message().c_str());
      return 2;
    }
    std::fprintf(stderr, "%s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weave: error: %s\n", e.what());
    return 3;
  }
  return exit_code();
}
