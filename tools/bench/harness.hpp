// The measurement harness every `weave bench` suite uses (../shared/MEASURE.md):
//  - each arm is captured once into a CUDA graph of `calls_per_graph` back-to-back calls, so the
//    per-call launch floor disappears; one replay = one sample; time per call = replay / calls;
//  - arms are timed alternating (A B A B ...) in one process, after warm-up replays;
//  - median / min / max and noise% = (max - min) / median over the samples;
//  - cold mode: the suite rotates through `cold_copies()` copies of its weights, selected by the
//    call index the harness passes, so every call reads its weights from HBM rather than L2;
//  - idle gating through NVML before a run and a busy flag after it;
//  - several ranks (one thread per GPU): each rank times its own graphs; an optional `align`
//    hook (e.g. a tiny NCCL all-reduce) runs before every sample, and the report takes the
//    per-rank maximum of medians (max_over_ranks).
// Nothing here validates results: suites poison outputs with NaN (testing/poison_nan.hpp)
// before the run and count wrong elements after it, and every Row carries that count.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace weave::bench {

struct Timing {
  double median_us = std::numeric_limits<double>::quiet_NaN();
  double min_us = std::numeric_limits<double>::quiet_NaN();
  double max_us = std::numeric_limits<double>::quiet_NaN();
  double noise_pct = std::numeric_limits<double>::quiet_NaN();
  int samples = 0;
};

// One thing to time. `enqueue(stream, call_idx)` enqueues one call on `stream` (no sync, no
// allocation: it is captured into a graph). call_idx runs 0..calls_per_graph-1 and lets cold
// mode pick a weight copy.
struct Arm {
  std::string name;
  std::function<void(cudaStream_t stream, int call_idx)> enqueue;
};

struct TimingConfig {
  int calls_per_graph = 20;  // calls captured in one graph (one sample)
  int warmup = 3;            // untimed replays of each graph before sampling
  int samples = 15;          // timed replays of each graph
  // Runs before each timed sample, outside the timed region (multi-rank alignment). May be empty.
  std::function<void(cudaStream_t)> align;
  // When set, runs after the samples once per arm, in arm order, with `replay`: one more untimed
  // launch of that arm's timed graph on the stream. The caller poisons the arm's output, replays
  // and checks, so the check sees what the timed graph writes, not a fresh eager call.
  std::function<void(size_t arm, const std::function<void()>& replay)> after_timing;
};

// Times every arm alternating, on `stream` (the caller's current device). Throws weave::Error.
std::vector<Timing> time_alternating(const std::vector<Arm>& arms, const TimingConfig& config,
                                     cudaStream_t stream);

// Per-rank maximum of medians (and the widest spread), for multi-rank reports.
Timing max_over_ranks(const std::vector<Timing>& per_rank);

// How many weight copies a cold run must rotate through so that one rotation touches at least
// `factor` x L2 bytes. Always >= 2, so consecutive calls never read the same copy.
int cold_copies(std::size_t bytes_per_copy, std::size_t l2_bytes, double factor = 3.0);

// --- NVML idle gating (libnvidia-ml is loaded at run time; absent -> available() is false) ---
class IdleGate {
 public:
  IdleGate();
  bool available() const { return available_; }
  const std::string& why_unavailable() const { return why_; }
  // GPU utilisation in percent for a CUDA ordinal, or -1 when unknown.
  int utilisation(int cuda_device) const;
  // Waits until every device reads below threshold_pct for `samples` consecutive samples 100 ms
  // apart, at most max_wait_s. Returns false (and a line naming the busy device) if it never did.
  bool wait_idle(const std::vector<int>& devices, int threshold_pct, int samples, double max_wait_s,
                 std::string* report) const;
  // After a run: waits out NVML's averaging window (~1.5 s, which would count our own kernels),
  // then returns "" or "cuda:N U% ..." for every device still above threshold_pct (someone else's
  // load during the run). Put it in the report meta and print it.
  std::string busy_after(const std::vector<int>& devices, int threshold_pct) const;

 private:
  bool available_ = false;
  std::string why_;
};

// --- Rows and reports ---
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One result row with the fixed columns. `wrong` < 0 means "not validated" and is reported as a
// failure, like wrong > 0.
struct Row {
  std::string shape;     // "8192x5120x2048" or "64MB"
  std::string quant;     // "bf16->bf16", "ptpc->bf16", "bf16 sum"
  std::string mode;      // "weave", "cublaslt", "ce", "lsa", "nccl"
  double time_us = kNaN;
  double tflops = kNaN;
  double algbw_gbps = kNaN;
  double busbw_gbps = kNaN;
  std::string baseline;  // name of the baseline arm measured in the same run
  double baseline_us = kNaN;
  double ratio = kNaN;   // time_us / baseline_us (< 1 means faster than the baseline)
  double noise_pct = kNaN;
  int64_t wrong = -1;
  nlohmann::json extra = nlohmann::json::object();  // suite-specific fields (ceilings, notes)
};

class Report {
 public:
  explicit Report(std::string suite) : suite_(std::move(suite)) {}
  void add(Row row) { rows_.push_back(std::move(row)); }
  const std::vector<Row>& rows() const { return rows_; }
  bool any_wrong() const;  // a row with wrong != 0
  // meta: machine, command, date, idle-gate state... written beside the rows.
  void print_table(std::FILE* out) const;
  void write_json(const std::string& path, const nlohmann::json& meta) const;
  nlohmann::json to_json() const;

 private:
  std::string suite_;
  std::vector<Row> rows_;
};

// Machine description for report headers: GPU names, SMs, L2, clocks, driver/runtime, NCCL.
nlohmann::json machine_json();

}  // namespace weave::bench
