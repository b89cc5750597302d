#include "cli/registry.hpp"

#include "cli/args.hpp"

namespace weave::cli {

std::vector<BenchSuite>& bench_suites() {
  static std::vector<BenchSuite> suites;
  return suites;
}

std::vector<std::pair<std::string, PlanTopicAdder>>& plan_topics() {
  static std::vector<std::pair<std::string, PlanTopicAdder>> topics;
  return topics;
}

bool register_bench_suite(BenchSuite suite) {
  bench_suites().push_back(std::move(suite));
  return true;
}

bool register_plan_topic(std::string name, PlanTopicAdder add) {
  plan_topics().emplace_back(std::move(name), std::move(add));
  return true;
}

int& exit_code() {
  static int code = 0;
  return code;
}

void add_common_bench_options(CLI::App& app, BenchOptions& o) {
  app.add_option("-w,--warmup", o.warmup, "untimed graph replays per arm before sampling")
      ->check(int_range(0, 1000))->capture_default_str();
  app.add_option("-i,--iters", o.iters, "timed graph replays (samples) per arm; median/min/max over these")
      ->check(int_range(1, 100000))->capture_default_str();
  app.add_option("--calls", o.calls_per_graph, "calls captured back-to-back in one CUDA graph (one sample)")
      ->check(int_range(1, 10000))->capture_default_str();
  app.add_flag("--hot", o.hot, "reuse one weight copy (L2-hot); default is cold: rotate copies past the L2");
  app.add_option("--json", o.json_path, "also write the rows and machine description as JSON to FILE (checked at start)");
  app.add_flag("--no-idle-gate", o.no_idle_gate, "do not wait for idle GPUs (NVML) before measuring");
  app.add_option("--idle-threshold", o.idle_threshold, "GPU utilisation (%) under which a GPU counts as idle")
      ->check(int_range(1, 100))->capture_default_str();
  app.add_option("--idle-wait", o.idle_wait_s, "seconds to wait for idle GPUs before measuring anyway (flagged)")
      ->check(finite_range(0.0, 3600.0))->capture_default_str();
  add_list_option(app, "--devices", o.devices, "CUDA ordinals to use, comma-separated, each once (default: all visible)",
                  int_range(0, INT32_MAX));
}

}  // namespace weave::cli
