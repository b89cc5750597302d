// `weave bench comm`: all-gather, reduce-scatter and all-reduce over weave's ce and lsa transports
// against NCCL in all of its configurations, nccl-tests style, one process with one thread per GPU.
//
// Arms per (op, size), all timed alternating in one process under CUDA graphs of back-to-back
// calls, ranks aligned by a barrier before every sample, per-rank maximum of medians:
//   nccl         NCCL on plain cudaMalloc buffers (how most frameworks call it)
//   nccl-sym     NCCL on symmetric-window buffers (NCCL's symmetric kernels)
//   nccl-ce      all-gather only: symmetric window + NCCL_CTA_POLICY_ZERO (NCCL's copy engines)
//   ce, lsa-*    weave, on its window buffers (zero-copy)
//   peer-copy    all-gather only: one cudaMemcpyAsync of the per-rank bytes to the next rank's
//                window, all ranks at once: the NVLink peer-copy ceiling, measured in the same run
// "best NCCL" = the fastest NCCL arm at that size; ratio = time / best NCCL time (< 1 is faster).
// Sizes follow nccl-tests: all-gather = output bytes, reduce-scatter = input bytes, all-reduce =
// buffer bytes; algbw = size / time; busbw = algbw * (n-1)/n (all-gather, reduce-scatter) or
// 2(n-1)/n (all-reduce). Every arm is validated at every size (#wrong): known per-rank values,
// output poisoned before the check and again before the timed replays, checked after both.
// Inputs change between timed samples: before each sample of each arm (outside the timed region,
// between two barriers) the output is poisoned again and the input rewritten from that sample's
// seed, and the check after timing expects the last sample's values. A call that delivers nothing,
// or a previous call's data, then shows as #wrong instead of leaving an earlier, equal result in
// place. (The calls inside one sample's graph repeat its input: rewriting it per call would put a
// fill kernel into every arm's timed region, longer than the small calls being measured.)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bench/harness.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/registry.hpp"
#include "comm/collective_impl.hpp"
#include "common/check.hpp"
#include "testing/comm_values.hpp"
#include "weave/collectives.hpp"
#include "weave/communicator.hpp"

namespace weave::cli {
namespace {

struct CommOptionsCli {
  std::vector<std::string> ops = {"all-gather", "all-reduce", "reduce-scatter"};
  std::string min_bytes = "8K", max_bytes = "256M";
  int factor = 4;
  std::string dtype = "bf16";
  bool check_targets = false;
  int lsa_blocks = 0;  // lsa grid cap (0 = from occupancy)
};

std::string size_name(size_t b) {
  if (b >= (size_t(1) << 30) && b % (size_t(1) << 30) == 0) return std::to_string(b >> 30) + "GB";
  if (b >= (size_t(1) << 20) && b % (size_t(1) << 20) == 0) return std::to_string(b >> 20) + "MB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + "KB";
  return std::to_string(b) + "B";
}

// --- device-side known values and checks ---
__device__ __host__ inline uint8_t pattern_byte(int src, size_t j, uint32_t seed) { return bench::comm_test_byte(src, j, seed); }
__device__ __host__ inline float small_int(int src, size_t j, uint32_t seed) { return bench::comm_test_int(src, j, seed); }

// The seed of timed sample `sample` of a size whose validation seed is `seed` (never `seed`).
inline uint32_t sample_seed(uint32_t seed, size_t sample) {
  return seed ^ (0x9E3779B9u * static_cast<uint32_t>(sample + 1));
}

// Poisons an output: NaN of the element type for the reductions (bf16 0x7FC0, fp32 0x7FC00000);
// for all-gather, each byte the complement of the byte it must receive, so an unwritten byte can
// never read as right.
__global__ void poison_output(char* p, size_t elems, int op, int bf16, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < elems; i += size_t(gridDim.x) * blockDim.x) {
    if (op == 0) p[i] = static_cast<char>(~pattern_byte(static_cast<int>(i / count), i % count, seed));
    else if (bf16) reinterpret_cast<uint16_t*>(p)[i] = 0x7FC0u;
    else reinterpret_cast<uint32_t*>(p)[i] = 0x7FC00000u;
  }
}

__global__ void fill_input(char* p, size_t elems, int op, int bf16, int rank, size_t base, uint32_t seed) {
  for (size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x; j < elems; j += size_t(gridDim.x) * blockDim.x) {
    if (op == 0) p[j] = static_cast<char>(pattern_byte(rank, base + j, seed));
    else if (bf16) reinterpret_cast<__nv_bfloat16*>(p)[j] = __float2bfloat16(small_int(rank, j, seed));
    else reinterpret_cast<float*>(p)[j] = small_int(rank, j, seed);
  }
}

// Counts output elements that differ from what every rank's known inputs must produce.
__global__ void count_wrong(const char* out, size_t elems, int op, int bf16, int rank, int world, size_t count,
                            uint32_t seed, unsigned long long* wrong) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < elems; i += size_t(gridDim.x) * blockDim.x) {
    if (op == 0) {
      local += static_cast<uint8_t>(out[i]) != pattern_byte(static_cast<int>(i / count), i % count, seed);
      continue;
    }
    const size_t g = op == 1 ? rank * count + i : i;  // reduce-scatter: my block of the inputs
    float want = 0;
    for (int s = 0; s < world; ++s) want += small_int(s, g, seed);
    const float have = bf16 ? __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(out)[i])
                            : reinterpret_cast<const float*>(out)[i];
    local += have != want;
  }
  if (local) atomicAdd(wrong, local);
}

// Bytes of one source block (the peer-copy ceiling lands exactly one block).
__global__ void count_wrong_block(const char* block, size_t count, int src, uint32_t seed, unsigned long long* wrong) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    local += static_cast<uint8_t>(block[i]) != pattern_byte(src, i, seed);
  if (local) atomicAdd(wrong, local);
}

struct Arm {
  std::string name;
  bool nccl = false;     // counts toward "best NCCL"
  bool ceiling = false;  // the peer-copy ceiling row
  CollectiveConfig cfg;
  bool window = true;    // run on the op's window buffers
  size_t max_size = 0;   // skip sizes above this (0: none); the ll arm, whose lines double the bytes
};

// The explicit ll arm runs up to here (the auto choice switches to the bandwidth protocols far
// below; larger ll calls would only show the doubled bytes, at a window twice the payload).
constexpr size_t kLLArmMaxSize = size_t(4) << 20;

constexpr int kMaxStepFactor = 1024;
constexpr int kMaxLsaBlocks = 4096;  // CollectiveHooks::max_blocks rule

std::vector<Arm> arms_for(CollectiveOp op, DType dtype, int world) {
  auto make = [&](std::string name, std::optional<Transport> t, Algorithm a, bool nccl, bool window) {
    Arm arm;
    arm.name = std::move(name);
    arm.nccl = nccl;
    arm.window = window;
    arm.cfg.op = op;
    arm.cfg.transport = t;
    arm.cfg.algorithm = a;
    arm.cfg.dtype = dtype;
    return arm;
  };
  std::vector<Arm> arms;
  arms.push_back(make("nccl", Transport::kNccl, Algorithm::kNcclDefault, true, false));
  arms.push_back(make("nccl-sym", Transport::kNccl, Algorithm::kNcclDefault, true, true));
  if (op == CollectiveOp::kAllGather) {
    arms.push_back(make("nccl-ce", Transport::kNccl, Algorithm::kNcclCopyEngine, true, true));
    arms.push_back(make("ce", Transport::kCe, Algorithm::kPush, false, true));
    arms.push_back(make("ce-pull", Transport::kCe, Algorithm::kPull, false, true));  // device-triggered
    for (double share : {0.15, 0.3}) {  // copy engines plus SM stores on the same links
      Arm hybrid = make("ce+sm" + std::to_string(static_cast<int>(share * 100)), Transport::kCe, Algorithm::kPush,
                        false, true);
      hybrid.cfg.ce_sm_share = share;
      arms.push_back(hybrid);
    }
    arms.push_back(make("lsa-push", Transport::kLsa, Algorithm::kPush, false, true));
    arms.push_back(make("lsa-pull", Transport::kLsa, Algorithm::kPull, false, true));
    arms.push_back(make("lsa-ll", Transport::kLsa, Algorithm::kLowLatency, false, true));
    Arm ceil = make("peer-copy", Transport::kCe, Algorithm::kPush, false, true);
    ceil.ceiling = true;
    if (world >= 2) arms.push_back(ceil);
  } else if (op == CollectiveOp::kReduceScatter) {
    arms.push_back(make("ce", Transport::kCe, Algorithm::kPush, false, true));
    arms.push_back(make("lsa", Transport::kLsa, Algorithm::kPush, false, true));
    arms.push_back(make("lsa-ll", Transport::kLsa, Algorithm::kLowLatency, false, true));
  } else {
    arms.push_back(make("ce-2shot", Transport::kCe, Algorithm::kTwoShot, false, true));
    arms.push_back(make("lsa-1shot", Transport::kLsa, Algorithm::kOneShot, false, true));
    arms.push_back(make("lsa-2shot", Transport::kLsa, Algorithm::kTwoShot, false, true));
    arms.push_back(make("lsa-ll", Transport::kLsa, Algorithm::kLowLatency, false, true));
  }
  for (auto& a : arms)
    if (a.cfg.algorithm == Algorithm::kLowLatency) a.max_size = kLLArmMaxSize;
  return arms;
}

template <typename... A>
std::string fmt(const char* f, A... a) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, a...);
  return buf;
}

struct RankResult {
  std::vector<bench::Timing> timings;  // per arm
  std::vector<int64_t> wrong;          // per arm
};

int run_comm(const BenchOptions& common, const CommOptionsCli& opt) {
  // Every option first: nothing below may probe a GPU or wait for one before the input is known good.
  check_bench_options(common);
  const auto dtype = parse_dtype(opt.dtype);
  WEAVE_EXPECT_ARG(dtype && (*dtype == DType::kBF16 || *dtype == DType::kF32),
                   "--dtype '" << opt.dtype << "': expected bf16 or fp32");
  const size_t lo = parse_size("-b/--minbytes", opt.min_bytes), hi = parse_size("-e/--maxbytes", opt.max_bytes);
  WEAVE_EXPECT_ARG(lo <= hi, "-b/--minbytes " << opt.min_bytes << " must not exceed -e/--maxbytes " << opt.max_bytes);
  WEAVE_EXPECT_ARG(opt.factor >= 2 && opt.factor <= kMaxStepFactor,
                   "-f/--stepfactor " << opt.factor << ": must be in 2.." << kMaxStepFactor);
  WEAVE_EXPECT_ARG(opt.lsa_blocks >= 0 && opt.lsa_blocks <= kMaxLsaBlocks,
                   "--lsa-blocks " << opt.lsa_blocks << ": must be in 0.." << kMaxLsaBlocks << " (0: from occupancy)");
  WEAVE_EXPECT_ARG(!opt.ops.empty(), "--op: name at least one collective");
  std::vector<size_t> sizes;
  for (size_t s = lo; s <= hi; s *= static_cast<size_t>(opt.factor)) sizes.push_back(s);
  std::vector<CollectiveOp> ops;
  for (const auto& name : opt.ops) {
    auto op = parse_collective_op(name);
    WEAVE_EXPECT_ARG(op.has_value(), "--op '" << name << "': expected all-gather, reduce-scatter or all-reduce");
    ops.push_back(*op);
  }
  std::vector<int> devices = bench_devices(common);
  if (devices.size() < 2) {
    std::fprintf(stderr, "weave bench comm: needs at least 2 Hopper GPUs, found %zu; skipped\n", devices.size());
    return 0;
  }
  if (devices.size() > 8) devices.resize(8);
  const std::string gate = gate_idle(common, devices);
  const int world = static_cast<int>(devices.size());
  std::fprintf(stderr, "weave bench comm: %d GPUs, creating communicators ...\n", world);
  auto comms = Communicator::create_local(devices);
  bench::Report report("comm");
  struct Target {
    std::string what;
    bool met;
  };
  std::vector<Target> targets;
  for (CollectiveOp op : ops) {
    const bool ag = op == CollectiveOp::kAllGather;
    const size_t esz = ag ? 1 : dtype_bytes(*dtype);
    // Per-rank count at each size (nccl-tests convention), rounded so every rank has whole elements.
    auto count_of = [&](size_t size) {
      const size_t per = op == CollectiveOp::kAllReduce ? size : size / world;
      return std::max<size_t>(1, per / esz);
    };
    const size_t max_count = count_of(sizes.back());
    std::vector<Arm> arms = arms_for(op, *dtype, world);
    auto runs_at = [&](const Arm& a, size_t size) { return a.max_size == 0 || size <= a.max_size; };
    for (auto& a : arms) {
      size_t largest = 0;
      for (size_t size : sizes)
        if (runs_at(a, size)) largest = size;
      a.cfg.max_count = count_of(largest == 0 ? sizes.front() : largest);
    }
    // --lsa-blocks caps the grid through the internal hook (the public config has no such knob).
    comm::CollectiveHooks hooks;
    hooks.max_blocks = opt.lsa_blocks;
    std::vector<std::vector<RankResult>> results(sizes.size(), std::vector<RankResult>(world));
    run_per_rank(comms, [&](Communicator& c) {
      const int r = c.rank(), w = c.world_size();
      std::vector<std::unique_ptr<Collective>> colls;
      for (const auto& a : arms) colls.push_back(Collective::Impl::create(c, a.cfg, hooks));
      const size_t in_max = (op == CollectiveOp::kReduceScatter ? w * max_count : max_count) * esz;
      const size_t out_max = (ag ? w * max_count : max_count) * esz;
      void *plain_in = nullptr, *plain_out = nullptr;
      WEAVE_CHECK_CUDA(cudaMalloc(&plain_in, in_max));
      WEAVE_CHECK_CUDA(cudaMalloc(&plain_out, out_max));
      unsigned long long* wrong_dev = nullptr;
      WEAVE_CHECK_CUDA(cudaMalloc(&wrong_dev, sizeof(unsigned long long)));
      cudaStream_t stream = nullptr;
      WEAVE_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      for (size_t si = 0; si < sizes.size(); ++si) {
        const size_t count = count_of(sizes[si]);
        const size_t in_elems = op == CollectiveOp::kReduceScatter ? w * count : count;
        const size_t out_elems = ag ? w * count : count;
        const uint32_t seed = static_cast<uint32_t>(si * 131 + 7);
        std::vector<bench::Arm> timed;
        std::vector<std::pair<const void*, void*>> io(arms.size());
        for (size_t a = 0; a < arms.size(); ++a) {
          Collective& coll = *colls[a];
          char* out = static_cast<char*>(arms[a].window ? coll.window_output() : plain_out);
          // all-gather in place (this rank's block of the output is its input, as a fused GEMM
          // writes it); the reductions out of place.
          const char* in = ag ? out + r * count : static_cast<char*>(arms[a].window ? coll.window_input() : plain_in);
          io[a] = {in, out};
        }
        const int op_code = ag ? 0 : op == CollectiveOp::kReduceScatter ? 1 : 2;
        // Poison the output (every element, in its dtype), then write the known inputs of `s`.
        auto prepare = [&](size_t a, uint32_t s) {
          auto [in, out] = io[a];
          poison_output<<<512, 256, 0, stream>>>(static_cast<char*>(out), out_elems, op_code, *dtype == DType::kBF16,
                                                 count, s);
          WEAVE_CHECK_LAUNCH();
          fill_input<<<512, 256, 0, stream>>>(const_cast<char*>(static_cast<const char*>(in)), in_elems, op_code,
                                              *dtype == DType::kBF16, r, 0, s);
          WEAVE_CHECK_LAUNCH();
          WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));  // before the barrier that lets peers write
        };
        // Wrong output elements of arm a against the inputs of seed `s`.
        auto validate = [&](size_t a, uint32_t s) -> int64_t {
          WEAVE_CHECK_CUDA(cudaMemsetAsync(wrong_dev, 0, sizeof(*wrong_dev), stream));
          if (arms[a].ceiling) {
            // The previous rank's plain copy landed in block `prev` of this rank's output.
            WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
            c.barrier();
            const int prev = (r - 1 + w) % w;
            count_wrong_block<<<512, 256, 0, stream>>>(static_cast<const char*>(io[a].second) + prev * count, count,
                                                       prev, s, wrong_dev);
          } else {
            count_wrong<<<512, 256, 0, stream>>>(static_cast<const char*>(io[a].second), out_elems, op_code,
                                                 *dtype == DType::kBF16, r, w, count, s, wrong_dev);
          }
          WEAVE_CHECK_LAUNCH();
          unsigned long long h = 0;
          WEAVE_CHECK_CUDA(cudaMemcpyAsync(&h, wrong_dev, sizeof(h), cudaMemcpyDeviceToHost, stream));
          WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
          colls[a]->check();
          return static_cast<int64_t>(h);
        };
        RankResult& rr = results[si][r];
        rr.wrong.assign(arms.size(), 0);
        std::vector<size_t> timed_arm;  // arm index of each timed entry (arms above their max_size are skipped)
        for (size_t a = 0; a < arms.size(); ++a) {
          if (!runs_at(arms[a], sizes[si])) continue;
          timed_arm.push_back(a);
          Collective* coll = colls[a].get();
          auto [in, out] = io[a];
          bench::Arm arm;
          arm.name = arms[a].name;
          if (arms[a].ceiling) {
            // One plain copy of this rank's block into the next rank's window (where the ce op would
            // land it): no protocol, no credits, no local work; the NVLink peer-copy ceiling.
            char* dst = static_cast<char*>(coll->peer_window_output((r + 1) % w)) + r * count;
            arm.enqueue = [dst, in, count](cudaStream_t s, int) {
              WEAVE_CHECK_CUDA(cudaMemcpyAsync(dst, in, count, cudaMemcpyDeviceToDevice, s));
            };
          } else {
            arm.enqueue = [coll, in, out, count](cudaStream_t s, int) { coll->run(in, out, count, s); };
          }
          timed.push_back(std::move(arm));
          // Validation run, before timing.
          prepare(a, seed);
          c.barrier();
          timed.back().enqueue(stream, 0);
          rr.wrong[a] += validate(a, seed);
          prepare(a, seed);  // poisoned again: the timed replays must rewrite every output element
        }
        WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
        c.barrier();
        bench::TimingConfig tc;
        tc.warmup = common.warmup;
        tc.samples = common.iters;
        const size_t bytes = sizes[si];
        tc.calls_per_graph = std::max(1, std::min(common.calls_per_graph, bytes >= (size_t(256) << 20) ? 5 : common.calls_per_graph));
        // time_alternating calls align before each arm's sample, arms in order, samples in order
        // (the same sequence on every rank): fresh inputs of that sample's seed for the arm about
        // to run, between a barrier after which no peer still reads this rank's input or writes
        // its output (every rank synchronised its previous sample) and one after which every
        // rank's input is in place. Outside the timed region.
        std::vector<uint32_t> last_seed(arms.size(), seed);
        size_t align_calls = 0;
        tc.align = [&](cudaStream_t) {
          const size_t a = timed_arm[align_calls % timed_arm.size()];
          const uint32_t s = sample_seed(seed, align_calls / timed_arm.size());
          ++align_calls;
          c.barrier();
          prepare(a, s);
          last_seed[a] = s;
          c.barrier();
        };
        const std::vector<bench::Timing> got = bench::time_alternating(timed, tc, stream);
        rr.timings.assign(arms.size(), bench::Timing{});  // NaN: not run at this size
        for (size_t k = 0; k < timed_arm.size(); ++k) rr.timings[timed_arm[k]] = got[k];
        for (size_t a : timed_arm) rr.wrong[a] += validate(a, last_seed[a]);
        c.barrier();
      }
      cudaStreamDestroy(stream);
      cudaFree(wrong_dev);
      cudaFree(plain_in);
      cudaFree(plain_out);
      colls.clear();
    });
    // Rows.
    const double bus = op == CollectiveOp::kAllReduce ? 2.0 * (world - 1) / world : double(world - 1) / world;
    for (size_t si = 0; si < sizes.size(); ++si) {
      std::vector<bench::Timing> per_arm;
      for (size_t a = 0; a < arms.size(); ++a) {
        std::vector<bench::Timing> ranks;
        for (int r = 0; r < world; ++r) ranks.push_back(results[si][r].timings[a]);
        per_arm.push_back(bench::max_over_ranks(ranks));
      }
      double best_nccl = 1e300;
      std::string best_name;
      for (size_t a = 0; a < arms.size(); ++a)
        if (arms[a].nccl && per_arm[a].median_us < best_nccl) best_nccl = per_arm[a].median_us, best_name = arms[a].name;
      const size_t count = count_of(sizes[si]);
      const size_t size_bytes = op == CollectiveOp::kAllReduce ? count * esz : count * esz * world;
      double ceiling_busbw = 0;
      for (size_t a = 0; a < arms.size(); ++a)
        if (arms[a].ceiling) ceiling_busbw = count * esz / (per_arm[a].median_us * 1e3);
      for (size_t a = 0; a < arms.size(); ++a) {
        if (!runs_at(arms[a], sizes[si])) continue;
        bench::Row row;
        row.shape = size_name(size_bytes);
        row.quant = std::string(to_string(op)) + (ag ? "" : " " + std::string(to_string(*dtype)));
        row.mode = arms[a].name;
        row.time_us = per_arm[a].median_us;
        row.algbw_gbps = size_bytes / (row.time_us * 1e3);
        row.busbw_gbps = arms[a].ceiling ? count * esz / (row.time_us * 1e3) : row.algbw_gbps * bus;
        row.baseline = "best:" + best_name;
        row.baseline_us = best_nccl;
        row.ratio = row.time_us / best_nccl;
        row.noise_pct = per_arm[a].noise_pct;
        int64_t wrong = 0;
        for (int r = 0; r < world; ++r) wrong += results[si][r].wrong[a];
        row.wrong = wrong;
        row.extra = {{"world", world}, {"per_rank_count", count}, {"best_nccl_arm", best_name}};
        if (ceiling_busbw > 0 && !arms[a].nccl && !arms[a].ceiling)
          row.extra["pct_of_peer_copy"] = 100.0 * row.busbw_gbps / ceiling_busbw;
        report.add(row);
      }
      // Targets (issue 5, 2 GPUs; issue 6 at 8 GPUs).
      auto best_weave = [&](const char* prefix) {
        double t = 1e300;
        for (size_t a = 0; a < arms.size(); ++a)
          if (!arms[a].nccl && !arms[a].ceiling && runs_at(arms[a], sizes[si]) && arms[a].name.rfind(prefix, 0) == 0)
            t = std::min(t, per_arm[a].median_us);
        return t;
      };
      const double weave_t = std::min(best_weave("ce"), best_weave("lsa"));
      const std::string at = " at " + size_name(size_bytes);
      if (op == CollectiveOp::kAllGather && size_bytes >= (size_t(64) << 20)) {
        targets.push_back({"all-gather busbw >= 1.05x best NCCL" + at +
                               fmt(": weave %.3fx (best weave %.1f us, best NCCL %.1f us)", best_nccl / weave_t, weave_t,
                                   best_nccl),
                           best_nccl / weave_t >= 1.05});
        if (ceiling_busbw > 0) {
          const double weave_busbw = count * esz * (world - 1) / (weave_t * 1e3);
          targets.push_back({"all-gather busbw >= 92% of peer copy" + at +
                                 fmt(": %.1f%% (%.1f of %.1f GB/s)", 100.0 * weave_busbw / ceiling_busbw, weave_busbw,
                                     ceiling_busbw),
                             weave_busbw >= 0.92 * ceiling_busbw});
        }
      }
      if (op == CollectiveOp::kAllReduce && size_bytes >= (size_t(64) << 20)) {
        const double need = world <= 2 ? 1.15 : 1.0;
        targets.push_back({fmt("all-reduce busbw >= %.2fx best NCCL", need) + at +
                               fmt(": weave %.3fx (best weave %.1f us, best NCCL %.1f us)", best_nccl / weave_t, weave_t,
                                   best_nccl),
                           best_nccl / weave_t >= need});
      }
      if (op == CollectiveOp::kAllReduce && size_bytes >= (size_t(8) << 10) && size_bytes <= (size_t(256) << 10)) {
        const double need = world <= 2 ? 0.7 : 0.8;
        targets.push_back({fmt("all-reduce latency <= %.2fx best NCCL's", need) + at +
                               fmt(": weave %.2f us = %.3fx of best NCCL %.2f us", weave_t, weave_t / best_nccl, best_nccl),
                           weave_t / best_nccl <= need});
      }
    }
  }
  const std::string busy_after = bench::IdleGate().busy_after(devices, common.idle_threshold);
  report.print_table(stdout);
  std::printf("# ratio = time / best NCCL time at that size (< 1: weave faster); busbw per nccl-tests; peer-copy busbw = "
              "per-rank bytes / time\n");
  int missed = 0;
  for (const auto& t : targets) {
    std::printf("# target %s: %s\n", t.met ? "MET   " : "MISSED", t.what.c_str());
    missed += !t.met;
  }
  if (!busy_after.empty()) std::printf("# BUSY after run: %s\n", busy_after.c_str());
  if (!common.json_path.empty()) {
    nlohmann::json tj = nlohmann::json::array();
    for (const auto& t : targets) tj.push_back({{"target", t.what}, {"met", t.met}});
    report.write_json(common.json_path, {{"machine", bench::machine_json()}, {"idle_gate", gate},
                                         {"busy_after", busy_after}, {"targets", tj}, {"world", world}});
  }
  comms.clear();
  if (report.any_wrong()) {
    std::fprintf(stderr, "weave bench comm: validation FAILED (#wrong > 0 in a row)\n");
    return 1;
  }
  return opt.check_targets && missed ? 1 : 0;
}

CommOptionsCli& comm_options() {
  static CommOptionsCli o;
  return o;
}

void add_comm_suite(CLI::App& bench, BenchOptions& common) {
  auto* cmd = bench.add_subcommand("comm", "all-gather / reduce-scatter / all-reduce: weave ce and lsa vs NCCL (plain, "
                                           "symmetric, copy-engine), nccl-tests style, >= 2 GPUs");
  auto& o = comm_options();
  add_list_option(*cmd, "--op", o.ops, "collectives: all-gather, reduce-scatter, all-reduce (comma-separated)");
  cmd->add_option("-b,--minbytes", o.min_bytes, "smallest size (nccl-tests convention; K/M/G suffixes)")->capture_default_str();
  cmd->add_option("-e,--maxbytes", o.max_bytes, "largest size")->capture_default_str();
  cmd->add_option("-f,--stepfactor", o.factor, "size multiplier between rows (2..1024)")
      ->check(int_range(2, kMaxStepFactor))->capture_default_str();
  cmd->add_option("--dtype", o.dtype, "reduction dtype: bf16 or fp32 (fp32 accumulation)")->capture_default_str();
  cmd->add_option("--lsa-blocks", o.lsa_blocks, "cap of the lsa (and ce reduce) grid; 0 = from occupancy")
      ->check(int_range(0, kMaxLsaBlocks))->capture_default_str();
  cmd->add_flag("--check-targets", o.check_targets, "exit 1 when a performance target (docs/perf/comm.md) is missed");
  cmd->footer(
      "Arms (each size, timed alternating under CUDA graphs, validated before and after timing):\n"
      "  NCCL:  nccl (plain cudaMalloc buffers), nccl-sym (symmetric-window buffers), nccl-ce (all-gather:\n"
      "         NCCL_CTA_POLICY_ZERO copy-engine collectives); 'best NCCL' is the fastest of them per size\n"
      "  weave: ce, ce-pull (device-triggered copies), ce+sm15/30 (all-gather), ce-2shot (all-reduce),\n"
      "         lsa-push, lsa-pull, lsa (reduce-scatter), lsa-1shot, lsa-2shot, lsa-ll (up to 4 MB)\n"
      "  peer-copy: one cudaMemcpyAsync of the per-rank block to the peer (all-gather ceiling)\n"
      "docs/perf/comm.md has a full run, its command and what limits each number.");
  cmd->callback([&common] { exit_code() = run_comm(common, comm_options()); });
}

int run_comm_default(const BenchOptions& common) {
  CommOptionsCli o;
  o.min_bytes = "8K";
  o.max_bytes = "64M";
  o.factor = 8;
  return run_comm(common, o);
}

}  // namespace

WEAVE_REGISTER_BENCH_SUITE(comm, "collectives: weave ce/lsa vs NCCL (plain, symmetric, copy-engine), >= 2 GPUs",
                           add_comm_suite, run_comm_default);

}  // namespace weave::cli
