// `weave bench copy`: device-to-device and peer copy bandwidth, by copy engine (cudaMemcpyAsync)
// and by SM kernel (16-byte loads/stores), against the ceilings recorded for the H200 machines.
// It exists to exercise the harness end to end on a GPU: graphs, alternating arms, NaN-poisoned
// destinations validated per row, before timing and again after it (fresh poison, one more replay
// of the timed graph), so a copy that goes wrong only in the timed graphs still shows. #wrong sums
// both checks: a deliberately skipped element, --inject-skip, must show as #wrong = 8 32-bit
// words (4 per check) and exit status 1.
//
// Bytes counted: algbw = bytes copied / time (one direction). For d2d, HBM traffic is twice that
// (read + write); the ceiling column says which convention it uses.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/harness.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/registry.hpp"
#include "common/check.hpp"
#include "testing/poison_nan.hpp"

namespace weave::cli {
namespace {

struct CopyOptions {
  std::vector<double> sizes_mb = {64, 256, 1024};
  bool inject_skip = false;
};

// 16-byte vector copy, 4 loads in flight per thread before the stores; `skip` (a uint4 index) is
// left unwritten for the negative control.
__global__ void sm_copy(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n, size_t skip) {
  constexpr int kUnroll = 4;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i + u * stride != skip) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride)
    if (i != skip) dst[i] = src[i];
}

__global__ void fill_pattern(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint32_t>(i * 2654435761u) ^ seed;
}

__global__ void count_mismatch(const uint32_t* a, const uint32_t* b, size_t n, unsigned long long* out) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    local += a[i] != b[i];
  if (local) atomicAdd(out, local);
}

struct DeviceBuffer {
  void* ptr = nullptr;
  int device = 0;
  DeviceBuffer(int dev, size_t bytes) : device(dev) {
    WEAVE_CHECK_CUDA(cudaSetDevice(dev));
    WEAVE_CHECK_CUDA(cudaMalloc(&ptr, bytes));
  }
  ~DeviceBuffer() {
    cudaSetDevice(device);
    cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Number of 32-bit words that differ between two buffers on `device` (peer-readable).
int64_t mismatches(int device, const void* a, const void* b, size_t bytes, cudaStream_t s) {
  WEAVE_CHECK_CUDA(cudaSetDevice(device));
  unsigned long long* d = nullptr;
  WEAVE_CHECK_CUDA(cudaMallocAsync(&d, sizeof(*d), s));
  WEAVE_CHECK_CUDA(cudaMemsetAsync(d, 0, sizeof(*d), s));
  count_mismatch<<<1024, 256, 0, s>>>(static_cast<const uint32_t*>(a), static_cast<const uint32_t*>(b), bytes / 4, d);
  WEAVE_CHECK_LAUNCH();
  unsigned long long h = 0;
  WEAVE_CHECK_CUDA(cudaMemcpyAsync(&h, d, sizeof(h), cudaMemcpyDeviceToHost, s));
  WEAVE_CHECK_CUDA(cudaFreeAsync(d, s));
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(s));
  return static_cast<int64_t>(h);
}

// Ceilings measured on the H200 machines (../shared/DEVICE.md, KINDS.md), GB/s one-direction.
constexpr double kD2dCeiling = 4300.0 / 2;  // 4.3 TB/s counting read + write
constexpr double kPeerCeCeiling = 395.0;
constexpr double kPeerSmCeiling = 370.0;

struct Case {
  std::string mode;
  int src_dev, dst_dev;
  bool sm;
  double ceiling;
};

// Largest --sizes entry: the suite holds a source and a destination of this size on a GPU.
constexpr double kMaxCopyMb = 65536;

int run_copy(const BenchOptions& common, const CopyOptions& opt) {
  // Every option first: nothing below may probe a GPU or wait for one before the input is known good.
  check_bench_options(common);
  WEAVE_EXPECT_ARG(!opt.sizes_mb.empty(), "--sizes: give at least one size in MB");
  for (double mb : opt.sizes_mb)
    WEAVE_EXPECT_ARG(std::isfinite(mb) && mb * 1048576.0 >= 16 && mb <= kMaxCopyMb,
                     "--sizes " << mb << ": each size (MB) must be a finite number, at least 16 bytes and at most "
                                << kMaxCopyMb << " MB");
  std::vector<int> devices = bench_devices(common);
  std::string gate = gate_idle(common, devices);
  std::vector<Case> cases;
  for (int d : {devices[0]}) {
    cases.push_back({"ce d2d", d, d, false, kD2dCeiling});
    cases.push_back({"sm d2d", d, d, true, kD2dCeiling});
  }
  if (devices.size() >= 2) {
    int a = devices[0], b = devices[1];
    int can = 0;
    WEAVE_CHECK_CUDA(cudaDeviceCanAccessPeer(&can, a, b));
    if (can) {
      for (auto [s, t] : {std::pair{a, b}, std::pair{b, a}}) {
        WEAVE_CHECK_CUDA(cudaSetDevice(s));
        cudaError_t e = cudaDeviceEnablePeerAccess(t, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError(); else WEAVE_CHECK_CUDA(e);
      }
      std::string ab = std::to_string(a) + "->" + std::to_string(b);
      cases.push_back({"ce peer " + ab, a, b, false, kPeerCeCeiling});
      cases.push_back({"sm peer " + ab, a, b, true, kPeerSmCeiling});
    } else {
      std::fprintf(stderr, "weave bench copy: cuda:%d cannot access cuda:%d peer-to-peer; peer rows skipped\n", a, b);
    }
  } else {
    std::fprintf(stderr, "weave bench copy: one GPU visible; peer rows need two\n");
  }

  bench::Report report("copy");
  for (double mb : opt.sizes_mb) {
    const size_t bytes = (static_cast<size_t>(mb * 1048576.0) / 16) * 16;
    for (const auto& c : cases) {
      std::fprintf(stderr, "weave bench copy: %s %.0f MB ...\n", c.mode.c_str(), mb);
      DeviceBuffer src(c.src_dev, bytes), dst(c.dst_dev, bytes);
      // The copy is driven from the source GPU: for the SM case its kernel stores to the peer.
      WEAVE_CHECK_CUDA(cudaSetDevice(c.src_dev));
      cudaStream_t s;
      WEAVE_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      fill_pattern<<<1024, 256, 0, s>>>(static_cast<uint32_t*>(src.ptr), bytes / 4, 0x9E3779B9u);
      WEAVE_CHECK_LAUNCH();
      const size_t n16 = bytes / 16;
      const size_t skip = opt.inject_skip && c.sm ? n16 / 2 : n16;  // n16 = skip nothing
      auto enqueue = [&](cudaStream_t st, int) {
        if (c.sm) {
          sm_copy<<<c.src_dev == c.dst_dev ? 132 * 8 : 528, 512, 0, st>>>(static_cast<const uint4*>(src.ptr), static_cast<uint4*>(dst.ptr), n16, skip);
          WEAVE_CHECK_LAUNCH();
        } else {
          WEAVE_CHECK_CUDA(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDefault, st));
        }
      };
      // Validation: poison the destination, run, compare with the source. Before timing one
      // eager call runs; after it, one more replay of the timed graph, so the destination the
      // timed calls left behind (it already equals the source) is never what is checked, and a
      // copy that goes wrong only in the timed graph shows.
      auto validate = [&](const std::function<void()>& run) {
        WEAVE_CHECK_CUDA(cudaSetDevice(c.dst_dev));
        bench::poison_nan(dst.ptr, bytes, DType::kF32, nullptr);
        WEAVE_CHECK_CUDA(cudaDeviceSynchronize());
        WEAVE_CHECK_CUDA(cudaSetDevice(c.src_dev));
        run();
        WEAVE_CHECK_CUDA(cudaStreamSynchronize(s));
        return mismatches(c.src_dev, src.ptr, dst.ptr, bytes, s);
      };
      const int64_t wrong_before = validate([&] { enqueue(s, 0); });

      bench::TimingConfig cfg;
      cfg.warmup = common.warmup;
      cfg.samples = common.iters;
      cfg.calls_per_graph = std::max(1, std::min(common.calls_per_graph, mb >= 512 ? 4 : 10));
      int64_t wrong_after = 0;
      cfg.after_timing = [&](size_t, const std::function<void()>& replay) { wrong_after = validate(replay); };
      auto t = bench::time_alternating({{c.mode, enqueue}}, cfg, s)[0];
      WEAVE_CHECK_CUDA(cudaStreamDestroy(s));

      bench::Row row;
      row.shape = std::to_string(static_cast<long long>(mb)) + "MB";
      row.quant = "bytes";
      row.mode = c.mode;
      row.time_us = t.median_us;
      row.algbw_gbps = bytes / (t.median_us * 1e3);
      row.busbw_gbps = row.algbw_gbps;
      row.baseline = "ceiling";
      row.baseline_us = bytes / (c.ceiling * 1e3);
      row.ratio = row.time_us / row.baseline_us;
      row.noise_pct = t.noise_pct;
      row.wrong = wrong_before + wrong_after;
      row.extra = {{"wrong_before_timing", wrong_before},
                   {"wrong_after_timing", wrong_after},
                   {"ceiling_gbps", c.ceiling},
                   {"pct_of_ceiling", 100.0 * row.algbw_gbps / c.ceiling},
                   {"ceiling_source", "shared/DEVICE.md + KINDS.md (H200)"}};
      report.add(row);
    }
  }
  const std::string busy_after = bench::IdleGate().busy_after(devices, common.idle_threshold);
  report.print_table(stdout);
  std::printf("# ratio = time / time at the recorded ceiling (1.00 = at ceiling); algbw in GB/s one direction\n");
  if (!busy_after.empty()) std::printf("# BUSY after run: %s\n", busy_after.c_str());
  if (!common.json_path.empty())
    report.write_json(common.json_path, {{"machine", bench::machine_json()}, {"idle_gate", gate},
                                         {"busy_after", busy_after}});
  if (report.any_wrong()) {
    std::fprintf(stderr, "weave bench copy: validation FAILED (#wrong > 0 in a row)\n");
    return 1;
  }
  return 0;
}

CopyOptions& copy_options() {
  static CopyOptions o;
  return o;
}

void add_copy_suite(CLI::App& bench, BenchOptions& common) {
  auto* cmd = bench.add_subcommand("copy", "device-to-device and peer copy bandwidth (copy engine and SM kernel) against the H200 ceilings");
  add_list_option(*cmd, "--sizes", copy_options().sizes_mb, "sizes in MB, comma-separated (16 bytes .. 65536 MB each)");
  cmd->add_flag("--inject-skip", copy_options().inject_skip,
                "negative control: the SM copy leaves one 16-byte element unwritten; the row must show #wrong = 8 (32-bit words: 4 "
                "before timing, 4 after)");
  cmd->callback([&common] { exit_code() = run_copy(common, copy_options()); });
}

int run_copy_default(const BenchOptions& common) {
  CopyOptions o;
  o.sizes_mb = {256};
  return run_copy(common, o);
}

}  // namespace

WEAVE_REGISTER_BENCH_SUITE(copy, "device and peer copy bandwidth vs the H200 ceilings", add_copy_suite,
                           run_copy_default);

}  // namespace weave::cli
