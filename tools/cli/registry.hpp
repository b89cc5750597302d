// How subcommands grow without editing main.cpp: a bench suite or a plan topic registers a
// function that adds its own CLI11 subcommand under `weave bench` / `weave plan`.
//
//   static void add_copy_suite(CLI::App& bench, weave::cli::BenchOptions& common);
//   WEAVE_REGISTER_BENCH_SUITE(copy, "device and peer copy bandwidth", add_copy_suite)
//
// The added subcommand's callback does the work and sets cli::exit_code().
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace weave::cli {

// Options every bench suite shares (nccl-tests vocabulary).
struct BenchOptions {
  int warmup = 3;             // -w: untimed graph replays per arm
  int iters = 15;             // -i: timed graph replays (samples) per arm
  int calls_per_graph = 20;   // --calls: calls captured in one graph
  bool hot = false;           // --hot: reuse one weight copy (default cold: rotate past L2)
  std::string json_path;      // --json FILE
  bool no_idle_gate = false;  // --no-idle-gate
  int idle_threshold = 5;     // --idle-threshold percent
  double idle_wait_s = 30;    // --idle-wait seconds
  std::vector<int> devices;   // --devices 0,1 (default: all visible)
};

using BenchSuiteAdder = std::function<void(CLI::App& bench, BenchOptions& common)>;
using PlanTopicAdder = std::function<void(CLI::App& plan)>;

struct BenchSuite {
  std::string name;
  std::string help;
  BenchSuiteAdder add;
  // Runs the suite with its defaults, for a bare `weave bench`; empty = not part of the default
  // run. Returns an exit code (0 ok, 1 a row failed validation or a target check).
  std::function<int(const BenchOptions& common)> run_default;
};

std::vector<BenchSuite>& bench_suites();
std::vector<std::pair<std::string, PlanTopicAdder>>& plan_topics();
bool register_bench_suite(BenchSuite suite);
bool register_plan_topic(std::string name, PlanTopicAdder add);

// Exit status the subcommand callbacks set (0 ok, 1 failed check, 2 usage/no GPU, 3 error).
int& exit_code();

// Adds the shared bench options to a suite's subcommand.
void add_common_bench_options(CLI::App& app, BenchOptions& options);

}  // namespace weave::cli

#define WEAVE_CLI_CAT_(a, b) a##b
#define WEAVE_CLI_CAT(a, b) WEAVE_CLI_CAT_(a, b)
#define WEAVE_REGISTER_BENCH_SUITE(name, help, adder, run_default)                       \
  static const bool WEAVE_CLI_CAT(weave_bench_suite_, name) =                             \
      ::weave::cli::register_bench_suite({#name, help, adder, run_default})
#define WEAVE_REGISTER_PLAN_TOPIC(name, adder) \
  static const bool WEAVE_CLI_CAT(weave_plan_topic_, name) = ::weave::cli::register_plan_topic(#name, adder)
