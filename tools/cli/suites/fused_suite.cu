#include "cli/suites/fused_suite.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <CLI/CLI.hpp>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "common/check.hpp"
#include "weave/error.hpp"
#include "weave/window_handle.hpp"

namespace weave::cli::fused_bench {

void add_world_options(CLI::App& app, WorldOptions& o) {
  app.add_option("--emulate-world", o.emulate_world,
                 "W ranks (1..8) as threads on ONE GPU (test harness, not NVLink; see below); 1 = world 1; "
                 "default: world 1")
      ->check(int_range(1, kMaxWorld));
  add_list_option(app, "--arms", o.arms, "arms to run, comma-separated (default: every arm that applies)");
  app.add_option("--timeout", o.timeout_s, "seconds that bound every rendezvous and device wait of the ranks")
      ->check(finite_range(0.1, 600))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the random inputs (>= 0)")->check(digits_only())->capture_default_str();
}


namespace {
__global__ void end_pdl_chain_kernel() {}
}  // namespace

std::string comm_only_emulated_note(const std::string& seen) {
  return "comm-only: left out of the emulated world unless --arms names it (its graph chains lsa calls, each of which "
         "lets the next call's grid become resident at once (PDL), so one rank's queued calls can hold the SMs the "
         "peer's call needs: " + seen + ")";
}

void end_pdl_chain(cudaStream_t stream) {
  end_pdl_chain_kernel<<<1, 32, 0, stream>>>();
  WEAVE_CHECK_LAUNCH();
}

void print_emulated_share(int world) {
  std::printf("# %s; the %d ranks share one GPU's SMs (grid SMs / %d - 1 per rank) and HBM: per-rank TFLOPS is about "
              "1/%d of the GPU's\n",
              kEmulatedLabel, world, world, world);
}

void check_world_options(const BenchOptions& common, int emulate_world, const char* suite) {
  WEAVE_EXPECT_ARG(emulate_world >= 0 && emulate_world <= kMaxWorld,
                   "--emulate-world " << emulate_world << ": must be in 1.." << kMaxWorld);
  WEAVE_EXPECT_ARG(emulate_world == 0 || common.devices.empty(),
                   "--emulate-world and --devices: one or the other (--emulate-world W runs W ranks on one GPU, "
                   "--devices one rank per listed GPU over NCCL)");
  WEAVE_EXPECT_ARG(common.devices.size() <= static_cast<size_t>(kMaxWorld),
                   "--devices: " << common.devices.size() << " GPUs; " << suite << " runs at most " << kMaxWorld
                                 << " ranks");
  for (size_t i = 0; i < common.devices.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      WEAVE_EXPECT_ARG(common.devices[i] != common.devices[j],
                       "--devices: GPU " << common.devices[i] << " listed twice (one rank per GPU; --emulate-world W "
                                         << "puts W ranks on one GPU)");
}

int world_of(const BenchOptions& common, int emulate_world) {
  if (emulate_world > 0) return emulate_world;
  return std::max<int>(1, static_cast<int>(common.devices.size()));
}

SuiteWorld::SuiteWorld(const BenchOptions& common, int emulate_world, int device, double timeout_s) {
  if (common.devices.empty()) {
    world_ = std::max(1, emulate_world);
    emulated_ = world_ > 1;
    devices_.assign(static_cast<size_t>(world_), device);
    ew_ = std::make_unique<bench::EmulatedWorld>(world_, device, timeout_s);
    return;
  }
  devices_ = common.devices;
  world_ = static_cast<int>(devices_.size());
  CommOptions o;
  o.tag = "weave bench (fused suite)";
  o.timeout_s = timeout_s;
  comms_ = Communicator::create_local(devices_, o);
  for (auto& c : comms_) groups_.push_back(comm::nccl_group(*c));
}

SuiteWorld::~SuiteWorld() {
  groups_.clear();  // before the communicators they point to
  comms_.clear();
}

int SuiteWorld::device_of(int rank) const { return devices_.at(static_cast<size_t>(rank)); }

Communicator& SuiteWorld::communicator(int rank) const {
  WEAVE_EXPECT(over_nccl(), Status::kInternal, "SuiteWorld::communicator: not a run over NCCL");
  return *comms_.at(static_cast<size_t>(rank));
}

void SuiteWorld::run(const std::function<void(comm::Group&)>& fn) {
  if (ew_) {
    ew_->run(fn);
    return;
  }
  run_per_rank(comms_, [&](Communicator& c) { fn(*groups_[static_cast<size_t>(c.rank())]); });
}

SuiteDevice::SuiteDevice(const BenchOptions& common, const char* suite) {
  const std::vector<int> devices = bench_devices(common);
  WEAVE_EXPECT(!devices.empty(), Status::kNoDevice, "no Hopper GPU visible");
  device = devices[0];
  if (common.devices.empty() && devices.size() > 1)
    std::fprintf(stderr, "weave bench %s: %zu GPUs visible; using cuda:%d only (--devices 0,1,...: one rank per GPU)\n",
                 suite, devices.size(), device);
  WEAVE_CHECK_CUDA(cudaSetDevice(device));
  gate = gate_idle(common, common.devices.empty() ? std::vector<int>{device} : devices);
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  WEAVE_CHECK_CUDA(cudaStreamCreateWithFlags(&main_stream, cudaStreamNonBlocking));
}

SuiteDevice::~SuiteDevice() {
  if (main_stream) cudaStreamDestroy(main_stream);
}

std::vector<bench::Timing> time_rank_arms(const comm::Group& g, const std::vector<bench::Arm>& arms,
                                          const BenchOptions& common, int calls, cudaStream_t stream) {
  bench::TimingConfig tc;
  tc.calls_per_graph = calls;
  tc.warmup = common.warmup;
  tc.samples = common.iters;
  tc.align = [&g](cudaStream_t) { g.barrier(); };
  g.barrier();
  const std::vector<bench::Timing> t = bench::time_alternating(arms, tc, stream);
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
  g.barrier();
  return t;
}

std::vector<bench::Timing> max_over_ranks(const std::vector<std::vector<ArmResult>>& res, size_t num_arms) {
  std::vector<bench::Timing> per_arm(num_arms);
  for (size_t i = 0; i < num_arms; ++i) {
    std::vector<bench::Timing> ranks;
    for (const auto& rank : res)
      if (rank[i].ran) ranks.push_back(rank[i].timing);
    if (!ranks.empty()) per_arm[i] = bench::max_over_ranks(ranks);
  }
  return per_arm;
}

double overlap_efficiency(double gemm_us, double comm_us, double fused_us) {
  return (gemm_us + comm_us - fused_us) / std::min(gemm_us, comm_us);
}

std::string overlap_line(int64_t m, double gemm_us, double comm_us, double fused_us, bool emulated) {
  return fmt("# m=%lld: T_gemm %.1f us, T_comm %.1f us, T_fused %.1f us: overlap efficiency "
             "(T_gemm + T_comm - T_fused) / min(T_gemm, T_comm) = %.2f%s",
             static_cast<long long>(m), gemm_us, comm_us, fused_us, overlap_efficiency(gemm_us, comm_us, fused_us),
             emulated ? " (emulated world: not an NVLink number)" : "");
}

void add_error_row(bench::Report& report, const char* suite, const std::string& shape, const std::string& quant,
                   int64_t m, const std::string& error, int world, bool emulated) {
  bench::Row row;
  row.shape = shape;
  row.quant = quant;
  row.mode = "error";
  row.extra = {{"error", error}, {"world", world}, {"emulated", emulated}};
  report.add(row);
  std::fprintf(stderr, "weave bench %s: m=%lld: ERROR %s\n(stopping: the ops may hold a recorded timeout)\n", suite,
               static_cast<long long>(m), error.c_str());
}

void print_table(const bench::Report& report, const TableSpec& s) {
  const char* label = s.emulated ? kEmulatedLabel : "";
  std::printf("%7s %6s %6s %-10s %-4s %-16s %10s %7s %7s %8s %7s %7s ", "m", "n", "k", "quant", "out", "mode", "time_us",
              "ratio", "vs_lt", "TFLOPS", "noise%", "#wrong");
  if (s.extra_header) std::printf("%8s ", s.extra_header);
  std::printf("%-6s %s\n", "world", s.emulated ? "label" : "");
  for (const bench::Row& r : report.rows()) {
    const auto& x = r.extra;
    if (r.mode == "error") {
      std::printf("%s %s: ERROR %s\n", r.shape.c_str(), r.quant.c_str(), x.value("error", "").c_str());
      continue;
    }
    const bool unavailable = x.contains("unavailable");
    std::string mode = r.mode;
    if (x.contains("auto_resolved")) mode += "(" + x["auto_resolved"].get<std::string>() + ")";
    const double vs_lt = x.contains(s.vs_lt_key) ? x[s.vs_lt_key].get<double>() : bench::kNaN;
    std::printf("%7lld %6lld %6lld %-10s %-4s %-16s %10s %7s %7s %8s %7s %7s ",
                static_cast<long long>(x["m"].get<int64_t>()), static_cast<long long>(s.n), static_cast<long long>(s.k),
                s.quant.c_str(), s.out.c_str(), mode.c_str(), unavailable ? "unavail" : num(r.time_us, 2).c_str(),
                num(r.ratio, 3).c_str(), num(vs_lt, 3).c_str(), num(r.tflops, 1).c_str(), num(r.noise_pct, 1).c_str(),
                unavailable ? "-" : std::to_string(r.wrong).c_str());
    if (s.extra_header)
      std::printf("%8s ", x.contains(s.extra_key) ? std::to_string(x[s.extra_key].get<int64_t>()).c_str() : "-");
    std::printf("%-6s %s\n", s.world_tag.c_str(), label);
  }
}

std::string print_closing(const bench::Report& report, const std::vector<std::string>& summary_lines,
                          const std::vector<std::string>& notes, int device, int idle_threshold) {
  for (const auto& l : summary_lines) std::printf("%s\n", l.c_str());
  for (const bench::Row& r : report.rows())
    if (r.extra.contains("unavailable"))
      std::printf("# unavailable: m=%lld %s: %s\n", static_cast<long long>(r.extra["m"].get<int64_t>()), r.mode.c_str(),
                  r.extra["unavailable"].get<std::string>().c_str());
  for (const auto& note : notes) std::printf("# not run: %s\n", note.c_str());
  const std::string busy_after = bench::IdleGate().busy_after({device}, idle_threshold);
  if (!busy_after.empty()) std::printf("# BUSY after run: %s\n", busy_after.c_str());
  std::fflush(stdout);
  return busy_after;
}

nlohmann::json run_meta(const BenchOptions& common, const RunFacts& f) {
  return {{"machine", bench::machine_json()},
          {"idle_gate", f.gate},
          {"busy_after", f.busy_after},
          {"device", f.device},
          {"world", f.world},
          {"emulated", f.emulated},
          {"label", f.emulated ? kEmulatedLabel : f.world1_label},
          {"cold", !common.hot},
          {"weight_copies_per_rank", f.copies},
          {"calls_per_graph", f.calls},
          {"warmup", common.warmup},
          {"samples", common.iters},
          {"seed", f.seed},
          {"m_max", f.m_max},
          {"not_run", f.notes}};
}

std::string fastest_right_arm(const std::vector<bench::Timing>& per_arm, const std::vector<std::vector<ArmResult>>& res,
                              const std::function<bool(size_t)>& takeable,
                              const std::function<std::string(size_t)>& name,
                              const std::function<bool(size_t)>& fallback) {
  double best = bench::kNaN, fallback_us = bench::kNaN;
  std::string best_name, fallback_name;
  for (size_t i = 0; i < per_arm.size(); ++i) {
    const double t = per_arm[i].median_us;
    if (std::isnan(t) || !takeable(i)) continue;
    bool right = true;
    for (const auto& rank : res) {
      bool checked = false;
      for (int64_t w : rank[i].wrong_from) {
        right &= w == 0 || w == -1;
        checked |= w >= 0;
      }
      right &= checked;
    }
    if (right && (std::isnan(best) || t < best)) best = t, best_name = name(i);
    if (right && fallback(i)) fallback_us = t, fallback_name = name(i);
  }
  if (!std::isnan(fallback_us) && fallback_us <= best * (1 + kCalibrationMargin)) return fallback_name;
  return best_name;
}

fused::Calibration calibration_of(const char* op, ScaleMode quant, ScaleLayout layout, DType out, int64_t n, int64_t k,
                                  int world, const std::string& world_tag, bool emulated) {
  fused::Calibration c;
  c.op = op;
  c.quant = quant;
  c.layout = layout;
  c.out = out;
  c.n = n;
  c.k = k;
  c.world = world;
  c.where = world_tag + (emulated ? " (emulated world: not NVLink)" : "");
  return c;
}

void write_calibration(const fused::Calibration& table, const std::string& path, const char* suite) {
  WEAVE_EXPECT(!table.rows.empty(), Status::kUnavailable,
               "--calibrate: no M had a timed arm auto can take without wrong elements; nothing written");
  std::ofstream f(path);
  f << "# written by weave bench " << suite << " --calibrate (per M: the fastest mode auto may take)\n"
    << table.to_text();
  f.close();
  WEAVE_EXPECT(f.good(), Status::kInvalidArgument, "--calibrate: cannot write '" << path << "'");
  std::printf("# calibration for auto written to %s (%zu rows): the op's config `calibration`, or weave plan %s "
              "--calibration\n",
              path.c_str(), table.rows.size(), suite);
}

}  // namespace weave::cli::fused_bench
