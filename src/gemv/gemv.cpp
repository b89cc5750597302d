// Decode GEMV host side: what it supports, how it splits a problem, and the launch.
#include "gemv/gemv.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>
#include <tuple>

#include "common/check.hpp"
#include "common/env.hpp"
#include "common/memo.hpp"
#include "gemv/gemv_all_reduce.hpp"
#include "gemv/gemv_params.hpp"
#include "hopper/tma_descriptor.hpp"
#include "hopper/wait_record.hpp"

namespace weave::detail {

namespace {

using gemv::kMaxSmemBytes;
using gemv::kPartStride;
using gemv::kRowsPerCta;
using gemv::kStepBytes;

int64_t elem_bytes(ScaleMode mode) { return mode == ScaleMode::kBF16 ? 2 : 1; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int tiles_for(int64_t m) { return m <= 8 ? 1 : m <= 16 ? 2 : 4; }

// Shared-memory bytes per token row of the staged A slice: 64 (mod 128) keeps the two token rows
// one quarter-warp reads on different banks.
int a_stride_for(int64_t k_slice) { return static_cast<int>(k_slice % 128 == 0 ? k_slice + 64 : k_slice); }

int scale_groups_for(ScaleMode mode, int64_t k_slice) {
  switch (mode) {
    case ScaleMode::kBlockscale: return static_cast<int>(k_slice / 128 + 2);  // slice may straddle
    case ScaleMode::kMxfp8: return static_cast<int>(k_slice / 32);
    default: return 0;
  }
}

struct Layout {
  int a_stride = 0, region0 = 0, scale_groups = 0, ring_offset = 0, smem = 0;
};

int smem_limit(WeightPath path, RingShape ring) {
  if (path == WeightPath::kRegisters) return kMaxSmemBytes;
  if (path == WeightPath::kStream) return gemv::kMaxSmemBytesTmaWide;
  return gemv::tma_ring_bytes(ring) > gemv::tma_ring_bytes(RingShape{}) ? gemv::kMaxSmemBytesTmaWide
                                                                         : gemv::kMaxSmemBytesTma;
}

// `m` token rows of A are staged (the MMAs take zeros for the rest of the 8 x tiles); the region
// is later the fp32 partial tile of all 8 x tiles tokens.
// Where the kernel pushes its cluster reduction (gemv_params.hpp pushes_reduction), the landing
// region of `landing_granule`-row shares follows everything else (gemv_push_reduce.cuh).
Layout layout_for(ScaleMode mode, int64_t m, int64_t k_slice, WeightPath path, RingShape ring = {}, int stages = 0,
                  int landing_granule = 1) {
  Layout l;
  if (path == WeightPath::kStream) {  // no A slice, no scales (bf16): the ring, later the partial tile
    l.smem = gemv::stream_smem_bytes(tiles_for(m), stages);
    return l;
  }
  const int tokens = 8 * tiles_for(m);
  l.a_stride = a_stride_for(k_slice);
  l.region0 = std::max(static_cast<int>(m) * l.a_stride, tokens * kPartStride * 4);
  l.scale_groups = scale_groups_for(mode, k_slice);
  int scale_bytes = 0;
  if (mode == ScaleMode::kPtpc) scale_bytes = (tokens + kRowsPerCta) * 4;  // sa[token], sb[row]
  if (mode == ScaleMode::kBlockscale) scale_bytes = l.scale_groups * tokens * 4;
  if (mode == ScaleMode::kMxfp8) scale_bytes = l.scale_groups * (tokens + 4) * 4;
  l.smem = l.region0 + scale_bytes;
  if (path == WeightPath::kTma) {
    l.ring_offset = (l.smem + 127) / 128 * 128;
    l.smem = l.ring_offset + gemv::tma_ring_bytes(ring);
  }
  if (gemv::pushes_reduction(path, tiles_for(m)))
    l.smem = (l.smem + 15) / 16 * 16 + gemv::push_landing_bytes(tiles_for(m), landing_granule);
  return l;
}

// K bytes per CTA: whole 64-byte steps (every path: the same split sums K in the same order).
int64_t k_slice_for(int64_t k_bytes, int split) { return ceil_div(ceil_div(k_bytes, kStepBytes), split) * kStepBytes; }

}  // namespace

const char* to_string(WeightPath path) {
  switch (path) {
    case WeightPath::kTma: return "tma";
    case WeightPath::kStream: return "stream";
    default: return "registers";
  }
}

std::string GemvConfig::describe() const {
  std::ostringstream os;
  os << "gemv " << to_string(path);
  if (path == WeightPath::kTma && !(ring == RingShape{})) os << " ring " << ring.steps_per_slot << "x" << ring.slots;
  if (depth != 0) os << " depth " << depth;
  if (path == WeightPath::kStream) os << " stages " << stages;
  os << " tiles " << tiles << " split " << split << " k_slice " << k_slice_bytes << " B grid "
     << split << "x" << n_blocks << " smem " << (smem_bytes + 1023) / 1024 << " KB " << waves
     << (waves == 1 ? " wave" : " waves") << " of <= " << clusters_per_wave << " clusters"
     << (device_residency ? "" : " (modelled)");
  return os.str();
}

std::string gemv_unsupported_reason(const GemmProblem& problem) {
  std::ostringstream why;
  if (problem.m < 1 || problem.m > kGemvMaxM) {
    why << "M = " << problem.m << ": the GEMV runs 1 <= M <= " << kGemvMaxM;
  } else if (problem.n < 1 || problem.k < 1) {
    why << "N and K must be >= 1 (got N = " << problem.n << ", K = " << problem.k << ")";
  } else if (problem.n > (int64_t(1) << 30)) {
    why << "N = " << problem.n << " exceeds the GEMV's 2^30 rows";
  } else if (problem.out_dtype != DType::kBF16 && problem.out_dtype != DType::kF32) {
    why << "output dtype " << to_string(problem.out_dtype) << ": the GEMV writes bf16 or fp32";
  } else if (problem.mode == ScaleMode::kMxfp8 && problem.scale_layout != ScaleLayout::kRaw) {
    why << "mxfp8 scale layout " << to_string(problem.scale_layout) << ": the GEMV reads raw scales only";
  } else if ((problem.k * elem_bytes(problem.mode)) % 16 != 0) {
    why << "K = " << problem.k << ": a row of " << to_string(problem.mode)
        << " operands must be a multiple of 16 bytes (16-byte loads)";
  } else if (problem.mode == ScaleMode::kBlockscale && problem.k % 128 != 0) {
    why << "K = " << problem.k << ": blockscale needs K to be a multiple of 128";
  } else if (problem.mode == ScaleMode::kMxfp8 && problem.k % 32 != 0) {
    why << "K = " << problem.k << ": mxfp8 needs K to be a multiple of 32";
  } else {
    // The registers path has the larger A budget: the GEMV runs wherever it fits.
    const int64_t k_slice = k_slice_for(problem.k * elem_bytes(problem.mode), kGemvMaxSplit);
    const Layout l = layout_for(problem.mode, problem.m, k_slice, WeightPath::kRegisters);
    if (l.smem > kMaxSmemBytes)
      why << "K = " << problem.k << " at M = " << problem.m << ": the A slice of a " << kGemvMaxSplit
          << "-way K split needs " << l.smem << " B of shared memory (limit " << kMaxSmemBytes << ")";
  }
  return why.str();
}

namespace {

// Shared memory per SM, and what the driver keeps per CTA, for the residency model.
constexpr int64_t kSmemPerSm = 228 * 1024, kSmemReservedPerCta = 1024;
// CTAs per SM the kernels' launch bounds promise (__launch_bounds__(kThreads, 2)).
constexpr int kCtasPerSmByRegisters = 2;

// Residency without a device: every SM holds as many CTAs of any cluster as registers and shared
// memory allow. Real GPUs place a cluster inside one GPC and hold fewer (GemvResidency).
int modelled_clusters(const GemvConfig& cfg, int num_sms) {
  const int64_t per_sm = std::min<int64_t>(kCtasPerSmByRegisters, kSmemPerSm / (cfg.smem_bytes + kSmemReservedPerCta));
  return static_cast<int>(std::max<int64_t>(1, num_sms * per_sm / cfg.split));
}

// Modelled time of one K split, in microseconds of a nominal 3.3 TB/s: each wave streams one CTA's
// bytes at the rate that many CTAs reach, plus a fixed cost per wave (the first loads' latency,
// staging A, the cluster reduction: ~2 us on H100, the GEMV's time at small N minus its bytes at
// the read rate). A wave of fewer than ~1.1 CTAs per SM is limited by each CTA's 32 KB in flight:
// on H100 one CTA per SM streamed 6-8% slower than 1.5 (split 2 against 3 over 64 bands,
// docs/perf/gemv_layer_splits_h100.txt).
double modelled_us(const GemvConfig& cfg, int capacity, int num_sms) {
  constexpr double kBytesPerUs = 3.3e6, kWaveUs = 2.0;
  // The stream path keeps its whole ring (>= 34 KB) in flight per CTA: one CTA per SM is the full rate.
  const double kFullRateCtasPerSm = cfg.path == WeightPath::kStream ? 1.0 : 1.1;
  const double cta_bytes = double(kRowsPerCta) * double(cfg.k_slice_bytes);
  const int64_t full = cfg.n_blocks / capacity, rest = cfg.n_blocks % capacity;
  auto wave_us = [&](int64_t clusters) {
    const double rate_ctas = std::max<double>(double(clusters) * cfg.split, kFullRateCtasPerSm * num_sms);
    return cta_bytes * rate_ctas / kBytesPerUs + kWaveUs;
  };
  return double(full) * wave_us(capacity) + (rest > 0 ? wave_us(rest) : 0.0);
}

}  // namespace

namespace {

bool power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

constexpr const char* kGemvPathRule =
    "expected auto, registers, registers:D (D = 4 or 8 warp steps in flight at one token tile), tma, tma:QxS (a "
    "ring of S slots of Q steps, powers of two, 2 <= Q x S <= 16), stream or stream:S (S = 2..16 ring stages; bf16 "
    "only)";

}  // namespace

GemvPathChoice gemv_path_from_env() {
  const std::string v = env::get_string("WEAVE_GEMV_PATH", "");
  GemvPathChoice c;
  if (v.empty() || v == "auto") return c;
  if (v.rfind("registers", 0) == 0) {
    c.path = GemvArgs::Path::kRegisters;
    if (v == "registers") return c;
    WEAVE_EXPECT_ARG(v == "registers:4" || v == "registers:8", "WEAVE_GEMV_PATH='" << v << "': " << kGemvPathRule);
    c.depth = v.back() - '0';
    return c;
  }
  if (v.rfind("stream", 0) == 0) {
    c.path = GemvArgs::Path::kStream;
    if (v == "stream") return c;
    int stages = 0;
    char tail = 0;
    const bool parsed = v.rfind("stream:", 0) == 0 && std::sscanf(v.c_str() + 7, "%d%c", &stages, &tail) == 1 &&
                        v.substr(7) == std::to_string(stages);  // no sign, space or leading zero
    WEAVE_EXPECT_ARG(parsed && stages >= gemv::kMinStreamStages && stages <= gemv::kMaxStreamStages,
                     "WEAVE_GEMV_PATH='" << v << "': " << kGemvPathRule);
    c.stages = stages;
    return c;
  }
  c.path = GemvArgs::Path::kTma;
  if (v == "tma") return c;
  int q = 0, slots = 0;
  char tail = 0;
  const bool parsed = v.rfind("tma:", 0) == 0 && std::sscanf(v.c_str() + 4, "%dx%d%c", &q, &slots, &tail) == 2;
  WEAVE_EXPECT_ARG(parsed && power_of_two(q) && power_of_two(slots) && q * slots >= 2 && q * slots <= 16,
                   "WEAVE_GEMV_PATH='" << v << "': " << kGemvPathRule);
  c.ring = RingShape{q, slots};
  return c;
}

namespace {

// Read once per process (a diagnostic set before start-up, not per call).
GemvPathChoice planned_path_from_env() {
  static const GemvPathChoice choice = gemv_path_from_env();
  return choice;
}

// The rules of a call that need no device: gemv_launch checks them before planning asks the
// device for residency, so a refused call never touches it.
void check_call(const GemmProblem& problem, int num_sms, int split) {
  const std::string why = gemv_unsupported_reason(problem);
  WEAVE_EXPECT_ARG(why.empty(), "gemv: " << why);
  WEAVE_EXPECT_ARG(num_sms >= 1, "argument 'num_sms': must be >= 1, got " << num_sms);
  WEAVE_EXPECT_ARG(split >= 0 && split <= kGemvMaxSplit,
                   "argument 'split': must be 0 (planner) or 1.." << kGemvMaxSplit << ", got " << split);
}

}  // namespace

int64_t gemv_k_steps(const GemmProblem& problem) { return ceil_div(problem.k * elem_bytes(problem.mode), kStepBytes); }

GemvConfig gemv_config(const GemmProblem& problem, int num_sms, int split_override, GemvArgs::Path path,
                       RingShape ring, const GemvResidency& residency, bool one_wave, int depth, int stages,
                       int landing_granule) {
  check_call(problem, num_sms, split_override);
  WEAVE_EXPECT_ARG(depth == 0 || depth == 4 || depth == 8, "argument 'depth': must be 0 (default), 4 or 8, got " << depth);
  WEAVE_EXPECT_ARG(stages == 0 || (stages >= gemv::kMinStreamStages && stages <= gemv::kMaxStreamStages),
                   "argument 'stages': must be 0 (default) or " << gemv::kMinStreamStages << ".."
                                                                << gemv::kMaxStreamStages << ", got " << stages);
  WEAVE_EXPECT_ARG(path != GemvArgs::Path::kStream || problem.mode == ScaleMode::kBF16,
                   "argument 'path': the stream path runs bf16 only, got mode " << to_string(problem.mode));
  WEAVE_EXPECT_ARG(power_of_two(ring.steps_per_slot) && power_of_two(ring.slots) &&
                       ring.steps_per_slot * ring.slots >= 2 && ring.steps_per_slot * ring.slots <= 16,
                   "argument 'ring': " << ring.steps_per_slot << "x" << ring.slots
                                       << ": steps per slot and slots must be powers of two, 2 <= product <= 16");
  const int64_t k_bytes = problem.k * elem_bytes(problem.mode);
  // Auto: bf16 streams where N has >= kGemvStreamMinBands bands (measured on H100 3-12% faster than
  // registers from 40 bands up, equal at 56-64 bands of 20-30 MB, 6-10% slower at 10 bands, 1280 x
  // 8192: docs/perf/gemm.md), the fp8 modes and narrower bf16 take the registers path (measured no
  // slower than the TMA ring); WEAVE_GEMV_PATH may ask for another (a diagnostic: every path from one
  // build). The TMA ring falls back to registers where its shared memory does not fit beside A.
  const bool planned = path == GemvArgs::Path::kAuto;
  if (planned) {
    const GemvPathChoice c = planned_path_from_env();
    path = c.path;
    ring = c.ring;
    if (depth == 0) depth = c.depth;
    if (stages == 0) stages = c.stages;
    const bool bf16 = problem.mode == ScaleMode::kBF16;
    const bool wide = ceil_div(problem.n, kRowsPerCta) >= kGemvStreamMinBands;
    if (path == GemvArgs::Path::kAuto) path = bf16 && wide ? GemvArgs::Path::kStream : GemvArgs::Path::kRegisters;
    // The variable's stream path covers bf16; the other modes keep the registers path.
    if (path == GemvArgs::Path::kStream && !bf16) path = GemvArgs::Path::kRegisters;
  }
  const bool stages_chosen = stages == 0;  // the planner may take the shallow ring (below)
  if (stages == 0) stages = kGemvDefaultStreamStages;
  auto shaped = [&](WeightPath wp, int split) {
    GemvConfig c;
    c.tiles = tiles_for(problem.m);
    c.n_blocks = ceil_div(problem.n, kRowsPerCta);
    c.path = wp;
    c.ring = wp == WeightPath::kTma ? ring : RingShape{};
    c.depth = wp == WeightPath::kRegisters && c.tiles == 1 ? depth : 0;  // instances exist for one tile only
    c.stages = wp == WeightPath::kStream ? stages : 0;
    c.split = split;
    c.k_slice_bytes = k_slice_for(k_bytes, split);
    c.smem_bytes = layout_for(problem.mode, problem.m, c.k_slice_bytes, wp, c.ring, c.stages, landing_granule).smem;
    return c;
  };
  auto fits = [&](const GemvConfig& c) { return c.smem_bytes <= smem_limit(c.path, c.ring); };
  // Residency is asked only of shapes that fit (a driver query per split and shape).
  auto with_residency = [&](GemvConfig c) {
    c.device_residency = static_cast<bool>(residency);
    c.clusters_per_wave = residency ? std::max(1, residency(c)) : modelled_clusters(c, num_sms);
    c.waves = ceil_div(c.n_blocks, c.clusters_per_wave);
    return c;
  };
  // The split: the override, else the one of least modelled time among those whose shared memory
  // fits (any 1..16, none past one 64-byte step per CTA; ties to the smaller).
  auto best_split = [&](WeightPath wp) -> std::optional<GemvConfig> {
    std::optional<GemvConfig> best;
    double best_us = 0;
    const int max_split = static_cast<int>(std::min<int64_t>(kGemvMaxSplit, gemv_k_steps(problem)));
    for (int s = 1; s <= max_split; ++s) {
      const GemvConfig shape = shaped(wp, s);
      if (!fits(shape)) continue;
      const GemvConfig c = with_residency(shape);
      if (one_wave && c.waves > 1) continue;
      const double us = modelled_us(c, c.clusters_per_wave, num_sms);
      if (!best || us < best_us * 0.995) best = c, best_us = us;
    }
    return best;
  };
  WeightPath wp = path == GemvArgs::Path::kTma      ? WeightPath::kTma
                  : path == GemvArgs::Path::kStream ? WeightPath::kStream
                                                    : WeightPath::kRegisters;
  if (split_override != 0) {
    GemvConfig c = shaped(wp, split_override);
    if (planned && wp != WeightPath::kRegisters && !fits(c)) c = shaped(WeightPath::kRegisters, split_override);
    const int limit = smem_limit(c.path, c.ring);
    WEAVE_EXPECT_ARG(fits(c), "argument 'split': " << split_override << " leaves a K slice of " << c.k_slice_bytes
                                                   << " B that needs " << c.smem_bytes
                                                   << " B of shared memory on the " << to_string(c.path)
                                                   << " path (limit " << limit << ")");
    return with_residency(c);
  }
  std::optional<GemvConfig> best = best_split(wp);
  // The stream path's 8-stage ring holds one CTA per SM; where that takes more than one wave, the
  // 4-stage ring (2-3 CTAs per SM) re-planned: H100, 25600 x 5120 91.6 against 107.7 us, 5120 x
  // 12800 47.3 against 56.2 (docs/perf/gemm.md, "The bf16 GEMV's stream path").
  if (wp == WeightPath::kStream && stages_chosen && best && best->waves > 1) {
    stages = kGemvShallowStreamStages;
    const std::optional<GemvConfig> shallow = best_split(wp);
    if (shallow && shallow->waves < best->waves) best = shallow;
  }
  if (!best && planned && wp != WeightPath::kRegisters) best = best_split(WeightPath::kRegisters);
  if (!best && one_wave) {
    const GemvConfig widest = with_residency(shaped(wp, 1));
    WEAVE_EXPECT(false, Status::kUnavailable,
                 "gemv: no K split of [M " << problem.m << ", N " << problem.n << ", K " << problem.k << "] keeps its "
                     << widest.n_blocks << " clusters resident at once (split 1: " << widest.clusters_per_wave
                     << " at a time); a kernel whose clusters wait for peers needs one wave");
  }
  // gemv_unsupported_reason checked that the registers path fits at the largest split.
  WEAVE_EXPECT_ARG(best.has_value(), "gemv: no K split of K = " << problem.k << " fits the shared memory of the "
                                                               << to_string(wp) << " path at M = " << problem.m);
  return *best;
}

namespace {

// The cached device residency of one launch shape (cudaOccupancyMaxActiveClusters is a driver
// query; gemv_config asks it for every candidate split of every call).
int device_clusters(ScaleMode mode, bool all_reduce, const GemvConfig& cfg) {
  int device = 0;
  WEAVE_CHECK_CUDA(cudaGetDevice(&device));
  using Key = std::tuple<int, int, bool, int, int, int, int, int>;
  static Memo<Key, int> memo;
  const Key key{device, static_cast<int>(mode), all_reduce, cfg.tiles, static_cast<int>(cfg.path), cfg.split,
                cfg.smem_bytes, cfg.depth};  // smem_bytes tells the stream path's stages apart
  return memo.get(key, [&] {
    int clusters = 0;
    const gemv::KernelParams p{};
    const CUtensorMap b_map{};
    const gemv::Launch launch{cfg, cfg.path, false, nullptr, &clusters};
    if (all_reduce) {
      gemv::launch_all_reduce(mode, p, GemvAllReduce{}, launch);
    } else if (cfg.path == WeightPath::kStream) {
      gemv::launch_stream_bf16(p, b_map, b_map, launch);
    } else {
      switch (mode) {
        case ScaleMode::kBF16: gemv::launch_bf16(p, b_map, launch); break;
        case ScaleMode::kPtpc: gemv::launch_ptpc(p, b_map, launch); break;
        case ScaleMode::kBlockscale: gemv::launch_blockscale(p, b_map, launch); break;
        case ScaleMode::kMxfp8: gemv::launch_mxfp8(p, b_map, launch); break;
      }
    }
    return clusters;
  });
}

}  // namespace

GemvResidency gemv_device_residency(ScaleMode mode, bool all_reduce_epilogue) {
  return [mode, all_reduce_epilogue](const GemvConfig& cfg) { return device_clusters(mode, all_reduce_epilogue, cfg); };
}

namespace {

// gemv_config with the device's residency, cached per device and call shape: a decode step
// launches the same few shapes over and over, and planning one weighs up to 16 splits.
GemvConfig planned_config(const GemmProblem& problem, int num_sms, const GemvArgs& args) {
  int device = 0;
  WEAVE_CHECK_CUDA(cudaGetDevice(&device));
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int, int, int, int, int, int, int, int, int>;
  static Memo<Key, GemvConfig> memo;
  const Key key{device, problem.m, problem.n, problem.k, static_cast<int>(problem.mode),
                static_cast<int>(problem.out_dtype), num_sms, args.split, static_cast<int>(args.path),
                args.ring.steps_per_slot, args.ring.slots, args.depth, args.stages};
  return memo.get(key, [&] {
    return gemv_config(problem, num_sms, args.split, args.path, args.ring, gemv_device_residency(args.mode),
                       /*one_wave=*/false, args.depth, args.stages);
  });
}

}  // namespace

int gemv_planned_split(const GemmProblem& problem, int num_sms) {
  GemvArgs args;
  args.mode = problem.mode;
  args.path = GemvArgs::Path::kRegisters;
  return planned_config(problem, num_sms, args).split;
}

namespace gemv {

GemmProblem checked_problem(const GemvArgs& args, int num_sms) {
  GemmProblem problem;
  problem.m = args.m, problem.n = args.n, problem.k = args.k;
  problem.mode = args.mode;
  problem.scale_layout = ScaleLayout::kRaw;
  problem.out_dtype = args.out_dtype;
  check_call(problem, num_sms, args.split);  // before planning touches the device

  const int64_t eb = elem_bytes(args.mode);
  const int64_t ob = args.out_dtype == DType::kF32 ? 4 : 2;
  WEAVE_EXPECT_ARG(args.a && args.b && args.c, "gemv: A, B and C must not be null");
  WEAVE_EXPECT_ARG(args.mode == ScaleMode::kBF16 || (args.scale_a && args.scale_b),
                   "gemv: mode " << to_string(args.mode) << " needs scale_a and scale_b");
  WEAVE_EXPECT_ARG(args.lda >= args.k && args.ldb >= args.k && args.ldc >= args.n,
                   "gemv: leading dimensions must cover a row (lda " << args.lda << ", ldb " << args.ldb
                                                                     << " >= K " << args.k << "; ldc "
                                                                     << args.ldc << " >= N " << args.n << ")");
  WEAVE_EXPECT_ARG((args.lda * eb) % 16 == 0 && (args.ldb * eb) % 16 == 0,
                   "gemv: lda and ldb must be multiples of 16 bytes (got " << args.lda * eb << " and "
                                                                           << args.ldb * eb << ")");
  WEAVE_EXPECT_ARG(reinterpret_cast<uintptr_t>(args.a) % 16 == 0 && reinterpret_cast<uintptr_t>(args.b) % 16 == 0,
                   "gemv: A and B must be 16-byte aligned");
  WEAVE_EXPECT_ARG(reinterpret_cast<uintptr_t>(args.c) % ob == 0, "gemv: C must be aligned to its element");
  if (args.mode == ScaleMode::kPtpc || args.mode == ScaleMode::kBlockscale)
    WEAVE_EXPECT_ARG(reinterpret_cast<uintptr_t>(args.scale_a) % 4 == 0 &&
                         reinterpret_cast<uintptr_t>(args.scale_b) % 4 == 0,
                     "gemv: fp32 scales must be 4-byte aligned");
  return problem;
}

KernelParams kernel_params(const GemvArgs& args, const GemvConfig& cfg) {
  const int64_t eb = elem_bytes(args.mode);
  const Layout l = layout_for(args.mode, args.m, cfg.k_slice_bytes, cfg.path, cfg.ring, cfg.stages);
  KernelParams p;
  p.a = static_cast<const uint8_t*>(args.a);
  p.b = static_cast<const uint8_t*>(args.b);
  p.scale_a = args.scale_a;
  p.scale_b = args.scale_b;
  const bool strided_sa = args.scale_a_row_stride != 0 || args.scale_a_k_stride != 0;
  p.sa_row_stride = strided_sa ? args.scale_a_row_stride : args.k / 128;
  p.sa_k_stride = strided_sa ? args.scale_a_k_stride : 1;
  p.c = args.c;
  p.m = static_cast<int>(args.m);
  p.n = static_cast<int>(args.n);
  p.k = args.k;
  p.k_bytes = args.k * eb;
  p.lda_bytes = args.lda * eb;
  p.ldb_bytes = args.ldb * eb;
  p.ldc = args.ldc;
  p.k_slice_bytes = cfg.k_slice_bytes;
  p.a_stride = l.a_stride;
  p.region0_bytes = l.region0;
  p.scale_groups = l.scale_groups;
  p.out_f32 = args.out_dtype == DType::kF32;
  // The ring waits and the pushed reduction's landing wait record here.
  p.record = args.record != nullptr ? args.record : hopper::wait_timeout_record();
  if (cfg.path == WeightPath::kTma) {
    p.ring_offset = l.ring_offset;
    p.ring_steps_log2 = __builtin_ctz(static_cast<unsigned>(cfg.ring.steps_per_slot));
    p.ring_slots_log2 = __builtin_ctz(static_cast<unsigned>(cfg.ring.slots));
  }
  if (cfg.path == WeightPath::kStream) {
    p.stages = cfg.stages;
    p.prologue_stages = args.stream_prologue != 0 ? args.stream_prologue : gemv::kStreamPrologueStages;
  }
  return p;
}

}  // namespace gemv

namespace {

// The stream path's tensor maps: [N, K] of B in [128 rows, 64 B] boxes and [M, K] of A in
// [8 x tiles tokens, 64 B] boxes (rows past M read as zeros). Memoised by everything they encode:
// weave::Gemm's decode route calls gemv_launch on every run() with the same operands, and two
// encodes would be host work on every call.
struct StreamMaps {
  CUtensorMap b, a;
};
StreamMaps stream_maps(const GemvArgs& args, int tiles) {
  using Key = std::tuple<const void*, const void*, int64_t, int64_t, int64_t, int64_t, int64_t, int>;
  static Memo<Key, StreamMaps> memo(256);
  return memo.get(Key{args.a, args.b, args.m, args.n, args.k, args.lda, args.ldb, tiles}, [&] {
    return StreamMaps{hopper::make_tma_2d("B", args.b, DType::kBF16, args.n, args.k, args.ldb, gemv::kRowsPerCta,
                                          kStepBytes / 2, hopper::TmaSwizzle::kNone),
                      hopper::make_tma_2d("A", args.a, DType::kBF16, args.m, args.k, args.lda, 8 * tiles,
                                          kStepBytes / 2, hopper::TmaSwizzle::kNone)};
  });
}

}  // namespace

void gemv_launch(const GemvArgs& args, int num_sms, cudaStream_t stream) {
  const GemmProblem problem = gemv::checked_problem(args, num_sms);
  const GemvConfig cfg = planned_config(problem, num_sms, args);
  const gemv::KernelParams p = gemv::kernel_params(args, cfg);
  CUtensorMap b_map{};  // the tma path's [N, K] view of B in one warp step's [16 rows, 64 B] boxes
  if (cfg.path == WeightPath::kTma) {
    const DType b_dtype = args.mode == ScaleMode::kBF16 ? DType::kBF16 : DType::kE4M3;
    b_map = hopper::make_tma_2d("B", args.b, b_dtype, args.n, args.k, args.ldb, gemv::kRowsPerWarp,
                                static_cast<int>(kStepBytes / elem_bytes(args.mode)), hopper::TmaSwizzle::kNone);
  }
  const gemv::Launch launch{cfg, cfg.path, args.pdl, stream};
  if (cfg.path == WeightPath::kStream) {
    const StreamMaps maps = stream_maps(args, cfg.tiles);
    gemv::launch_stream_bf16(p, maps.b, maps.a, launch);
    return;
  }
  switch (args.mode) {
    case ScaleMode::kBF16: gemv::launch_bf16(p, b_map, launch); break;
    case ScaleMode::kPtpc: gemv::launch_ptpc(p, b_map, launch); break;
    case ScaleMode::kBlockscale: gemv::launch_blockscale(p, b_map, launch); break;
    case ScaleMode::kMxfp8: gemv::launch_mxfp8(p, b_map, launch); break;
  }
}

}  // namespace weave::detail
