// What the fused-op bench suites (gemm-ag, gemm-ar, gemm-rs) share, so both say and measure the same way:
// the emulated world's label and the comm-only note, the world options and the one GPU they run
// on, the per-rank timing of a row's arms (alternating under CUDA graphs, every rank barriered
// before every sample; per arm the per-rank maximum of medians), the overlap line, the table, the
// closing notes and the JSON meta. Each suite keeps its arms, inputs and checks.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "fused/calibration.hpp"
#include "bench/harness.hpp"
#include "cli/commands.hpp"
#include "cli/registry.hpp"
#include "common/check.hpp"
#include "comm/group.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gemm_operands.hpp"
#include "weave/communicator.hpp"

namespace weave::cli::fused_bench {

// On every emulated row, header and JSON document.
inline constexpr const char* kEmulatedLabel =
    "emulated world on one GPU: peer traffic is local L2/HBM, NOT NVLink numbers";

// Why comm-only is left out of an emulated run unless --arms names it: its graph chains lsa calls,
// and every lsa kernel opens with griddepcontrol.launch_dependents (pdl, docs/memory_ordering.md),
// so the next call's grid, and through it every queued call's, becomes resident at once, blocked
// in griddepcontrol.wait: one rank's queued calls then hold the SMs the peer's current call needs
// (the SM-share cap of "residency" bounds one grid, not a chain). Named in --arms, it runs with
// end_pdl_chain after each call, which ends the chain; its time then includes that kernel.
// `seen` says where it was observed.
std::string comm_only_emulated_note(const std::string& seen);
// An empty kernel launched without PDL: the next call's grid cannot become resident before the
// previous call's grid has completed.
void end_pdl_chain(cudaStream_t stream);

// "# <label>; the W ranks share one GPU's SMs (grid SMs / W - 1 per rank) and HBM: ..." (stdout).
void print_emulated_share(int world);

template <typename... A>
std::string fmt(const char* f, A... a) {
  // A std::string_view or std::string through varargs is undefined (it crashed gemm-ag's header).
  static_assert(((std::is_arithmetic_v<A> || std::is_pointer_v<A>) && ...),
                "fmt: pass numbers and C strings (std::string(x).c_str()), not objects");
  char buf[512];
  std::snprintf(buf, sizeof(buf), f, a...);
  return buf;
}
inline std::string num(double v, int prec) { return std::isnan(v) ? "-" : fmt("%.*f", prec, v); }

// The options both suites take besides their shape (a suite's option struct derives from it).
struct WorldOptions {
  int emulate_world = 0;          // 0: not given (world 1)
  std::vector<std::string> arms;  // empty: every arm that applies
  double timeout_s = 30;
  uint64_t seed = 1;
};
// Registers --emulate-world, --arms, --timeout and --seed on a suite's subcommand.
void add_world_options(CLI::App& app, WorldOptions& o);

// What an arm of a fused suite is: the op in one of its modes, the collective alone, cuBLASLt's
// GEMM, weave::Gemm (the standalone GEMM the op's GEMM leg is held to), or (over NCCL) cuBLASLt's
// GEMM followed by NCCL's collective on plain buffers or on an NCCL symmetric window (NCCL's own
// fastest kernels): what users run today.
enum class ArmKind { kOp, kCommOnly, kCublasLt, kWeaveGemm, kCublasLtNccl, kCublasLtNcclSym };
inline bool is_cublaslt(ArmKind k) {
  return k == ArmKind::kCublasLt || k == ArmKind::kCublasLtNccl || k == ArmKind::kCublasLtNcclSym;
}
// A GEMM alone (cuBLASLt's or weave::Gemm): cuBLASLt's problem into the arm's own C, nothing moved.
inline bool is_gemm_alone(ArmKind k) { return k == ArmKind::kCublasLt || k == ArmKind::kWeaveGemm; }

// --emulate-world (0: not given, world 1) and --devices (one rank per listed GPU over real NCCL
// communicators, any count 1..8, distinct ordinals), one or the other. Throws
// Error(kInvalidArgument) naming the option.
void check_world_options(const BenchOptions& common, int emulate_world, const char* suite);
// The world a run of these options has: --emulate-world W, else the --devices count, else 1.
int world_of(const BenchOptions& common, int emulate_world);

// The ranks of a run, one host thread each: W ranks on one GPU (the emulated world, and world 1
// without --devices: a one-rank group without NCCL), or one rank per --devices GPU over real NCCL
// communicators (Communicator::create_local; world 1 included, where split-nccl runs over a
// one-rank communicator). Every rank runs the same code either way.
class SuiteWorld {
 public:
  SuiteWorld(const BenchOptions& common, int emulate_world, int device, double timeout_s);
  ~SuiteWorld();
  SuiteWorld(const SuiteWorld&) = delete;
  SuiteWorld& operator=(const SuiteWorld&) = delete;

  int size() const noexcept { return world_; }
  bool emulated() const noexcept { return emulated_; }  // W >= 2 ranks on one GPU
  bool over_nccl() const noexcept { return !comms_.empty(); }
  int device_of(int rank) const;
  // Rank r's communicator (over_nccl() only).
  Communicator& communicator(int rank) const;
  // fn(group) on one thread per rank (its device current); rethrows the lowest rank's error.
  void run(const std::function<void(comm::Group&)>& fn);

 private:
  int world_ = 1;
  bool emulated_ = false;
  std::vector<int> devices_;
  std::unique_ptr<bench::EmulatedWorld> ew_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<comm::Group>> groups_;
};

// --preset NAME[,NAME...]: every preset's shape is checked first (before any GPU work), then the
// suite runs once per preset (`run` on a copy of `opt` with that shape); the exit status is the
// worst run's. Without --preset: one run. shapes_of(opt.shape, world) expands the presets.
template <class SuiteOptions, class ShapesOf, class Run>
int run_each_preset(const BenchOptions& common, const SuiteOptions& opt, const char* suite, ShapesOf shapes_of,
                    Run run) {
  check_bench_options(common);
  check_world_options(common, opt.emulate_world, suite);
  const auto shapes = shapes_of(opt.shape, world_of(common, opt.emulate_world));
  if (shapes.size() > 1) {
    // One file per run would be overwritten by the next preset's run.
    WEAVE_EXPECT_ARG(common.json_path.empty(), "--json: one preset per run when writing JSON (--preset names "
                                                   << shapes.size() << ")");
    WEAVE_EXPECT_ARG(opt.calibrate.empty() && opt.calibration.empty(),
                     "--calibrate/--calibration: a table is for one shape; give one --preset (--preset names "
                         << shapes.size() << ")");
  }
  int worst = 0;
  for (const auto& shape : shapes) {
    SuiteOptions one = opt;
    one.shape = shape;
    worst = std::max(worst, run(common, one));
  }
  return worst;
}

// The GPU a suite sets up on: bench_devices' first (a line on stderr when more are visible and
// none was asked for), made current; every --devices GPU idle-gated; its L2 size and a stream for
// set-up work.
struct SuiteDevice {
  int device = 0;
  std::string gate;  // gate_idle's line, for the JSON meta
  int l2_bytes = 0;
  cudaStream_t main_stream = nullptr;
  SuiteDevice(const BenchOptions& common, const char* suite);
  ~SuiteDevice();
  SuiteDevice(const SuiteDevice&) = delete;
  SuiteDevice& operator=(const SuiteDevice&) = delete;
};

// One rank's objects (made once, in its thread): its stream, its weight copies, its arms.
template <typename RankArm>
struct RankState {
  cudaStream_t stream = nullptr;
  std::vector<bench::DeviceOperand> b;  // this rank's weight copies (identical bytes)
  std::vector<RankArm> arms;
  ~RankState() {
    if (stream) cudaStreamDestroy(stream);
  }
};

// Frees every rank's state on that rank's own thread when it goes out of scope (also when a run
// throws): over NCCL an op's window (ncclCommWindowDeregister, ncclDevCommDestroy) is freed
// collectively, so ranks freed one after another from one thread would wait for each other.
template <typename State>
class FreeStatesPerRank {
 public:
  FreeStatesPerRank(SuiteWorld& world, std::vector<std::unique_ptr<State>>& states) : world_(world), states_(states) {}
  ~FreeStatesPerRank() {
    try {
      world_.run([this](comm::Group& g) { states_.at(static_cast<size_t>(g.rank())).reset(); });
    } catch (...) {
      // A broken world (a rank gave up): the states are freed below, one thread; a broken
      // communicator skips its collective steps (SymmetricWindow::release).
    }
    states_.clear();
  }
  FreeStatesPerRank(const FreeStatesPerRank&) = delete;
  FreeStatesPerRank& operator=(const FreeStatesPerRank&) = delete;

 private:
  SuiteWorld& world_;
  std::vector<std::unique_ptr<State>>& states_;
};

// One rank's result of one arm at one M.
struct ArmResult {
  bench::Timing timing;
  std::vector<int64_t> wrong_from;  // per source rank; -1: not checked
  int64_t differing = -1;           // elements not bitwise equal to the arm it must equal; -1: not compared
  double rel_l2 = -1;               // largest relative L2 error against the reference over the checks; -1: none
  std::string unavailable;
  std::string resolved, reason;     // auto: the mode it ran and why
  std::string gemm_plan, gemm_plan_reason;  // weave-gemm, emulated world: its SM share's plan and why
  bool ran = false;
};

// Times `arms` on this rank: every rank at the same time, barriered before every sample (and
// before and after the whole), `calls` calls per graph, the shared warm-up and sample counts.
std::vector<bench::Timing> time_rank_arms(const comm::Group& g, const std::vector<bench::Arm>& arms,
                                          const BenchOptions& common, int calls, cudaStream_t stream);
// Per arm: the per-rank maximum of medians over the ranks that ran it (res[rank][arm]).
std::vector<bench::Timing> max_over_ranks(const std::vector<std::vector<ArmResult>>& res, size_t num_arms);

// --calibrate: among the arms `takeable(i)` says auto may take, the fastest (per_arm median) whose
// every rank's check found 0 wrong elements; "" if none ran. name(i): the mode name to record.
// The arm `fallback(i)` marks (split-lsa) is kept unless another beats it by more than
// kCalibrationMargin: near ties flip with a run's noise (measured, emulated W = 2, gemm-ag
// m = 1024: fused-lsa 1.4% faster than split-lsa in one run, 5.6% slower in the next), and a
// table that records a coin flip makes auto slower than the best split by that run's noise.
inline constexpr double kCalibrationMargin = 0.03;  // the most auto may trail the best split
std::string fastest_right_arm(const std::vector<bench::Timing>& per_arm, const std::vector<std::vector<ArmResult>>& res,
                              const std::function<bool(size_t)>& takeable,
                              const std::function<std::string(size_t)>& name,
                              const std::function<bool(size_t)>& fallback);
// An empty table of this suite's op shape (rows are added per M), labelled with where it runs.
fused::Calibration calibration_of(const char* op, ScaleMode quant, ScaleLayout layout, DType out, int64_t n, int64_t k,
                                  int world, const std::string& world_tag, bool emulated);
// Writes the table (a header comment naming `suite`) to `path`; kUnavailable if it has no rows,
// kInvalidArgument if the file cannot be written. Prints where it went.
void write_calibration(const fused::Calibration& table, const std::string& path, const char* suite);

// (T_gemm + T_comm - T_fused) / min(T_gemm, T_comm): 1 when the shorter leg is hidden entirely.
double overlap_efficiency(double gemm_us, double comm_us, double fused_us);
// "# m=...: T_gemm ..., T_comm ..., T_fused ...: overlap efficiency ... = 0.42[ (emulated ...)]"
std::string overlap_line(int64_t m, double gemm_us, double comm_us, double fused_us, bool emulated);

// A row that says why M stopped the run (an arm threw), and its stderr line.
void add_error_row(bench::Report& report, const char* suite, const std::string& shape, const std::string& quant,
                   int64_t m, const std::string& error, int world, bool emulated);

// The table (nccl-tests style): m n k quant out mode time_us ratio vs_lt TFLOPS noise% #wrong
// [extra] world [label]. Every emulated row carries kEmulatedLabel.
struct TableSpec {
  int64_t n = 0, k = 0;
  std::string quant, out, world_tag;
  bool emulated = false;
  const char* vs_lt_key = "";             // the rows' extra field of the vs_lt column
  const char* extra_header = nullptr;     // an optional integer column after #wrong ...
  const char* extra_key = nullptr;        // ... from this extra field (absent: "-")
};
void print_table(const bench::Report& report, const TableSpec& spec);

// After the table: the overlap lines, the unavailable arms, the notes ("# not run: ..."), then
// whether someone else loaded the GPU during the run; returns that (for the meta).
std::string print_closing(const bench::Report& report, const std::vector<std::string>& summary_lines,
                          const std::vector<std::string>& notes, int device, int idle_threshold);

// The JSON meta both suites write beside their rows.
struct RunFacts {
  int device = 0;
  std::string gate, busy_after;
  int world = 1;
  bool emulated = false;
  std::string world1_label;  // the label of a world-1 run
  int copies = 1, calls = 1;
  uint64_t seed = 0;
  int64_t m_max = 0;
  std::vector<std::string> notes;
};
nlohmann::json run_meta(const BenchOptions& common, const RunFacts& f);

}  // namespace weave::cli::fused_bench
