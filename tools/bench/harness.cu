#include "bench/harness.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "common/check.hpp"

namespace weave::bench {

namespace {

// RAII holders so an exception in the middle of timing releases what was made.
struct GraphExec {
  cudaGraphExec_t exec = nullptr;
  ~GraphExec() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};
struct Event {
  cudaEvent_t ev = nullptr;
  Event() { WEAVE_CHECK_CUDA(cudaEventCreate(&ev)); }
  ~Event() { cudaEventDestroy(ev); }
};

Timing summarise(std::vector<double> us) {
  Timing t;
  t.samples = static_cast<int>(us.size());
  if (us.empty()) return t;
  std::sort(us.begin(), us.end());
  const size_t n = us.size();
  t.median_us = n % 2 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
  t.min_us = us.front();
  t.max_us = us.back();
  t.noise_pct = t.median_us > 0 ? 100.0 * (t.max_us - t.min_us) / t.median_us : 0.0;
  return t;
}

}  // namespace

std::vector<Timing> time_alternating(const std::vector<Arm>& arms, const TimingConfig& config,
                                     cudaStream_t stream) {
  WEAVE_EXPECT_ARG(config.calls_per_graph >= 1, "calls_per_graph must be >= 1 (got "
                                                    << config.calls_per_graph << ")");
  WEAVE_EXPECT_ARG(config.samples >= 1, "samples must be >= 1 (got " << config.samples << ")");
  WEAVE_EXPECT_ARG(config.warmup >= 0, "warmup must be >= 0 (got " << config.warmup << ")");
  std::vector<GraphExec> graphs(arms.size());
  for (size_t a = 0; a < arms.size(); ++a) {
    // Run each call once eagerly: loads modules (lazy loading would otherwise load inside the
    // capture) and surfaces launch errors with a clear stack before capture.
    for (int c = 0; c < std::min(config.calls_per_graph, 2); ++c) arms[a].enqueue(stream, c);
    WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
    cudaGraph_t graph = nullptr;
    WEAVE_CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      for (int c = 0; c < config.calls_per_graph; ++c) arms[a].enqueue(stream, c);
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    WEAVE_CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    cudaError_t inst = cudaGraphInstantiate(&graphs[a].exec, graph, 0);
    cudaGraphDestroy(graph);
    WEAVE_CHECK_CUDA(inst);
  }
  for (int w = 0; w < config.warmup; ++w)
    for (auto& g : graphs) WEAVE_CHECK_CUDA(cudaGraphLaunch(g.exec, stream));
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));

  Event start, stop;
  std::vector<std::vector<double>> per_arm(arms.size());
  for (int s = 0; s < config.samples; ++s) {
    for (size_t a = 0; a < arms.size(); ++a) {
      if (config.align) config.align(stream);
      WEAVE_CHECK_CUDA(cudaEventRecord(start.ev, stream));
      WEAVE_CHECK_CUDA(cudaGraphLaunch(graphs[a].exec, stream));
      WEAVE_CHECK_CUDA(cudaEventRecord(stop.ev, stream));
      WEAVE_CHECK_CUDA(cudaEventSynchronize(stop.ev));
      float ms = 0;
      WEAVE_CHECK_CUDA(cudaEventElapsedTime(&ms, start.ev, stop.ev));
      per_arm[a].push_back(1000.0 * ms / config.calls_per_graph);
    }
  }
  if (config.after_timing)
    for (size_t a = 0; a < arms.size(); ++a)
      config.after_timing(a, [&] { WEAVE_CHECK_CUDA(cudaGraphLaunch(graphs[a].exec, stream)); });
  std::vector<Timing> out;
  for (auto& v : per_arm) out.push_back(summarise(v));
  return out;
}

Timing max_over_ranks(const std::vector<Timing>& per_rank) {
  Timing t;
  for (const auto& r : per_rank) {
    if (t.samples == 0 || r.median_us > t.median_us) t = r;
  }
  for (const auto& r : per_rank) t.noise_pct = std::max(t.noise_pct, r.noise_pct);
  return t;
}

int cold_copies(std::size_t bytes_per_copy, std::size_t l2_bytes, double factor) {
  if (bytes_per_copy == 0) return 2;
  double need = factor * static_cast<double>(l2_bytes) / static_cast<double>(bytes_per_copy);
  return std::max(2, static_cast<int>(std::ceil(need)));
}

// --- NVML through dlopen: the few entry points the gate needs, declared here ---
namespace {
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct Nvml {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*by_pci)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  std::string error;
  Nvml() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      error = "libnvidia-ml.so.1 not loadable (no NVIDIA driver?)";
      return;
    }
    init = reinterpret_cast<decltype(init)>(dlsym(lib, "nvmlInit_v2"));
    by_pci = reinterpret_cast<decltype(by_pci)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    util = reinterpret_cast<decltype(util)>(dlsym(lib, "nvmlDeviceGetUtilizationRates"));
    if (!init || !by_pci || !util) {
      error = "libnvidia-ml lacks the utilisation entry points";
      lib = nullptr;
      return;
    }
    if (init() != 0) {
      error = "nvmlInit failed";
      lib = nullptr;
    }
  }
};
const Nvml& nvml() {
  static Nvml instance;
  return instance;
}
}  // namespace

IdleGate::IdleGate() {
  available_ = nvml().lib != nullptr;
  if (!available_) why_ = nvml().error;
}

int IdleGate::utilisation(int cuda_device) const {
  if (!available_) return -1;
  char bus[32] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), cuda_device) != cudaSuccess) return -1;
  nvmlDevice_t dev = nullptr;
  if (nvml().by_pci(bus, &dev) != 0) return -1;
  nvmlUtilization_t u{};
  if (nvml().util(dev, &u) != 0) return -1;
  return static_cast<int>(u.gpu);
}

bool IdleGate::wait_idle(const std::vector<int>& devices, int threshold_pct, int samples,
                         double max_wait_s, std::string* report) const {
  if (!available_) {
    if (report) *report = "idle gate unavailable: " + why_;
    return true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int quiet = 0;
  while (true) {
    int busiest = -1, busiest_util = -1;
    for (int d : devices) {
      int u = utilisation(d);
      if (u > busiest_util) busiest_util = u, busiest = d;
    }
    quiet = busiest_util < threshold_pct ? quiet + 1 : 0;
    if (quiet >= samples) {
      if (report) *report = "GPUs idle (< " + std::to_string(threshold_pct) + "% for " +
                            std::to_string(samples) + " samples)";
      return true;
    }
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited > max_wait_s) {
      if (report)
        *report = "GPU cuda:" + std::to_string(busiest) + " still " +
                  std::to_string(busiest_util) + "% busy after " + std::to_string(max_wait_s) +
                  " s of waiting";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::string IdleGate::busy_after(const std::vector<int>& devices, int threshold_pct) const {
  if (!available_) return "";
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  std::string busy;
  for (int d : devices) {
    int u = utilisation(d);
    if (u > threshold_pct) busy += "cuda:" + std::to_string(d) + " " + std::to_string(u) + "% ";
  }
  return busy;
}

// --- reports ---
bool Report::any_wrong() const {
  for (const auto& r : rows_)
    if (r.wrong != 0) return true;
  return false;
}

static std::string num(double v, int prec) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", prec, v);
  return buf;
}

void Report::print_table(std::FILE* out) const {
  std::fprintf(out, "# suite: %s\n", suite_.c_str());
  std::fprintf(out, "%-22s %-16s %-12s %10s %8s %8s %8s %-12s %11s %7s %7s %7s\n", "shape",
               "dtype/quant", "mode", "time_us", "TFLOPS", "algbw", "busbw", "baseline",
               "baseline_us", "ratio", "noise%", "#wrong");
  for (const auto& r : rows_) {
    std::string wrong = r.wrong < 0 ? "unchk" : std::to_string(r.wrong);
    std::fprintf(out, "%-22s %-16s %-12s %10s %8s %8s %8s %-12s %11s %7s %7s %7s\n",
                 r.shape.c_str(), r.quant.c_str(), r.mode.c_str(), num(r.time_us, 2).c_str(),
                 num(r.tflops, 1).c_str(), num(r.algbw_gbps, 1).c_str(),
                 num(r.busbw_gbps, 1).c_str(), r.baseline.empty() ? "-" : r.baseline.c_str(),
                 num(r.baseline_us, 2).c_str(), num(r.ratio, 3).c_str(),
                 num(r.noise_pct, 1).c_str(), wrong.c_str());
  }
  std::fflush(out);
}

static nlohmann::json jnum(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

nlohmann::json Report::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : rows_) {
    rows.push_back({{"shape", r.shape},          {"quant", r.quant},
                    {"mode", r.mode},            {"time_us", jnum(r.time_us)},
                    {"tflops", jnum(r.tflops)},  {"algbw_gbps", jnum(r.algbw_gbps)},
                    {"busbw_gbps", jnum(r.busbw_gbps)}, {"baseline", r.baseline},
                    {"baseline_us", jnum(r.baseline_us)}, {"ratio", jnum(r.ratio)},
                    {"noise_pct", jnum(r.noise_pct)}, {"wrong", r.wrong},
                    {"extra", r.extra}});
  }
  return {{"suite", suite_}, {"rows", rows}};
}

void Report::write_json(const std::string& path, const nlohmann::json& meta) const {
  nlohmann::json doc = to_json();
  doc["meta"] = meta;
  std::ofstream f(path);
  WEAVE_EXPECT_ARG(f.good(), "--json '" << path << "': cannot open for writing");
  f << doc.dump(2) << "\n";
  WEAVE_EXPECT_ARG(f.good(), "--json '" << path << "': write failed");
}

nlohmann::json machine_json() {
  nlohmann::json m;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  m["cuda_driver"] = driver;
  m["cuda_runtime"] = runtime;
  int nccl = 0;
  ncclGetVersion(&nccl);
  m["nccl"] = nccl;
  nlohmann::json gpus = nlohmann::json::array();
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    int clock_khz = 0, mem_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, d);
    cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, d);
    gpus.push_back({{"name", p.name},
                    {"sm", std::to_string(p.major) + "." + std::to_string(p.minor)},
                    {"sms", p.multiProcessorCount},
                    {"l2_bytes", p.l2CacheSize},
                    {"mem_bytes", p.totalGlobalMem},
                    {"sm_clock_khz", clock_khz},
                    {"mem_clock_khz", mem_khz}});
  }
  m["gpus"] = gpus;
  return m;
}

}  // namespace weave::bench
