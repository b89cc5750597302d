// Decode GEMV host side: what it supports, how it splits a problem, and the launch.
#include "gemv/gemv.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "common/check.hpp"
#include "common/env.hpp"
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
  return gemv::tma_ring_bytes(ring) > gemv::tma_ring_bytes(RingShape{}) ? gemv::kMaxSmemBytesTmaWide
                                                                         : gemv::kMaxSmemBytesTma;
}

Layout layout_for(ScaleMode mode, int tiles, int64_t k_slice, WeightPath path, RingShape ring = {}) {
  Layout l;
  const int tokens = 8 * tiles;
  l.a_stride = a_stride_for(k_slice);
  l.region0 = std::max(tokens * l.a_stride, tokens * kPartStride * 4);
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
  return l;
}

int64_t k_slice_for(int64_t k_bytes, int split) { return ceil_div(ceil_div(k_bytes, kStepBytes), split) * kStepBytes; }

}  // namespace

const char* to_string(WeightPath path) { return path == WeightPath::kTma ? "tma" : "registers"; }

std::string GemvConfig::describe() const {
  std::ostringstream os;
  os << "gemv " << to_string(path);
  if (path == WeightPath::kTma && !(ring == RingShape{})) os << " ring " << ring.steps_per_slot << "x" << ring.slots;
  os << " tiles " << tiles << " split " << split << " k_slice " << k_slice_bytes << " B grid "
     << split << "x" << n_blocks << " smem " << (smem_bytes + 1023) / 1024 << " KB";
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
    const Layout l = layout_for(problem.mode, tiles_for(problem.m), k_slice, WeightPath::kRegisters);
    if (l.smem > kMaxSmemBytes)
      why << "K = " << problem.k << " at M = " << problem.m << ": the A slice of a " << kGemvMaxSplit
          << "-way K split needs " << l.smem << " B of shared memory (limit " << kMaxSmemBytes << ")";
  }
  return why.str();
}

namespace {

// The K split on `path`: the override, else the planner's rule. Split K until a CTA's slice is
// about 640 K elements (320 for bf16 at M <= 8), but keep the grid within ~2.5 CTAs per SM (two
// are resident); then raise it until the path's shared memory fits. Calibrated on H200 with
// tests/gpu/test_gemv_bandwidth.cu, which times every split (registers path: the fastest splits
// it measured on H200 for 8192x1280, 5120x2048 and 7168x2048; on H100 often not the fastest, see
// docs/perf/gemm.md).
int split_for(const GemmProblem& problem, const GemvConfig& cfg, int num_sms, int split_override, WeightPath path,
              RingShape ring) {
  if (split_override != 0) return split_override;
  const int64_t k_bytes = problem.k * elem_bytes(problem.mode);
  const int64_t target_k = (problem.mode == ScaleMode::kBF16 && cfg.tiles == 1) ? 320 : 640;
  int split = 1;
  while (split < kGemvMaxSplit && ceil_div(problem.k, split) > target_k &&
         (split < 8 || cfg.n_blocks * split < num_sms))
    split *= 2;
  while (split > 1 && 2 * cfg.n_blocks * split > 5 * int64_t(num_sms)) split /= 2;
  while (split < kGemvMaxSplit &&
         layout_for(problem.mode, cfg.tiles, k_slice_for(k_bytes, split), path, ring).smem > smem_limit(path, ring))
    split *= 2;
  return split;
}

}  // namespace

namespace {

bool power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

GemvPathChoice gemv_path_from_env() {
  const std::string v = env::get_string("WEAVE_GEMV_PATH", "");
  GemvPathChoice c;
  if (v.empty() || v == "auto") return c;
  if (v == "registers") {
    c.path = GemvArgs::Path::kRegisters;
    return c;
  }
  c.path = GemvArgs::Path::kTma;
  if (v == "tma") return c;
  int q = 0, slots = 0;
  char tail = 0;
  const bool parsed = v.rfind("tma:", 0) == 0 && std::sscanf(v.c_str() + 4, "%dx%d%c", &q, &slots, &tail) == 2;
  WEAVE_EXPECT_ARG(parsed && power_of_two(q) && power_of_two(slots) && q * slots >= 2 && q * slots <= 16,
                   "WEAVE_GEMV_PATH='" << v
                                       << "': expected auto, registers, tma or tma:QxS (a ring of S slots of Q "
                                          "steps, powers of two, 2 <= Q x S <= 16)");
  c.ring = RingShape{q, slots};
  return c;
}

namespace {

// Read once per process (a diagnostic set before start-up, not per call).
GemvPathChoice planned_path_from_env() {
  static const GemvPathChoice choice = gemv_path_from_env();
  GemvPathChoice c = choice;
  if (c.path != GemvArgs::Path::kTma) c.path = GemvArgs::Path::kRegisters;
  return c;
}

}  // namespace

GemvConfig gemv_config(const GemmProblem& problem, int num_sms, int split_override, GemvArgs::Path path,
                       RingShape ring) {
  const std::string why = gemv_unsupported_reason(problem);
  WEAVE_EXPECT_ARG(why.empty(), "gemv: " << why);
  WEAVE_EXPECT_ARG(num_sms >= 1, "argument 'num_sms': must be >= 1, got " << num_sms);
  const bool pow2 = split_override > 0 && (split_override & (split_override - 1)) == 0;
  WEAVE_EXPECT_ARG(split_override == 0 || (pow2 && split_override <= kGemvMaxSplit),
                   "argument 'split': must be 0 (planner) or a power of two <= " << kGemvMaxSplit
                                                                                << ", got " << split_override);
  GemvConfig cfg;
  cfg.tiles = tiles_for(problem.m);
  cfg.n_blocks = ceil_div(problem.n, kRowsPerCta);
  const int64_t k_bytes = problem.k * elem_bytes(problem.mode);
  WEAVE_EXPECT_ARG(power_of_two(ring.steps_per_slot) && power_of_two(ring.slots) &&
                       ring.steps_per_slot * ring.slots >= 2 && ring.steps_per_slot * ring.slots <= 16,
                   "argument 'ring': " << ring.steps_per_slot << "x" << ring.slots
                                       << ": steps per slot and slots must be powers of two, 2 <= product <= 16");
  auto fits = [&](WeightPath wp, int split) {
    return layout_for(problem.mode, cfg.tiles, k_slice_for(k_bytes, split), wp, ring).smem <= smem_limit(wp, ring);
  };
  // Auto: the registers path (measured no slower than the TMA ring, docs/perf/gemm.md), unless
  // WEAVE_GEMV_PATH asks for the ring (a diagnostic: either path from one build); the ring falls
  // back to registers where its shared memory does not fit beside A.
  const bool planned = path == GemvArgs::Path::kAuto;
  if (planned) {
    const GemvPathChoice c = planned_path_from_env();
    path = c.path;
    ring = c.ring;
  }
  cfg.path = path == GemvArgs::Path::kTma ? WeightPath::kTma : WeightPath::kRegisters;
  if (planned && cfg.path == WeightPath::kTma &&
      !fits(WeightPath::kTma, split_for(problem, cfg, num_sms, split_override, WeightPath::kTma, ring)))
    cfg.path = WeightPath::kRegisters;
  cfg.ring = cfg.path == WeightPath::kTma ? ring : RingShape{};
  const int split = split_for(problem, cfg, num_sms, split_override, cfg.path, cfg.ring);
  cfg.split = split;
  cfg.k_slice_bytes = k_slice_for(k_bytes, split);
  const Layout l = layout_for(problem.mode, cfg.tiles, cfg.k_slice_bytes, cfg.path, cfg.ring);
  const int limit = smem_limit(cfg.path, cfg.ring);
  WEAVE_EXPECT_ARG(l.smem <= limit, "argument 'split': " << split << " leaves a K slice of " << cfg.k_slice_bytes
                                                         << " B that needs " << l.smem
                                                         << " B of shared memory on the " << to_string(cfg.path)
                                                         << " path (limit " << limit << ")");
  cfg.smem_bytes = l.smem;
  return cfg;
}

void gemv_launch(const GemvArgs& args, int num_sms, cudaStream_t stream) {
  GemmProblem problem;
  problem.m = args.m, problem.n = args.n, problem.k = args.k;
  problem.mode = args.mode;
  problem.scale_layout = ScaleLayout::kRaw;
  problem.out_dtype = args.out_dtype;
  const GemvConfig cfg = gemv_config(problem, num_sms, args.split, args.path, args.ring);

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

  const Layout l = layout_for(args.mode, cfg.tiles, cfg.k_slice_bytes, cfg.path, cfg.ring);
  gemv::KernelParams p;
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
  CUtensorMap b_map{};  // the tma path's [N, K] view of B in one warp step's [16 rows, 64 B] boxes
  if (cfg.path == WeightPath::kTma) {
    p.ring_offset = l.ring_offset;
    p.ring_steps_log2 = __builtin_ctz(static_cast<unsigned>(cfg.ring.steps_per_slot));
    p.ring_slots_log2 = __builtin_ctz(static_cast<unsigned>(cfg.ring.slots));
    p.record = hopper::wait_timeout_record();
    const DType b_dtype = args.mode == ScaleMode::kBF16 ? DType::kBF16 : DType::kE4M3;
    b_map = hopper::make_tma_2d("B", args.b, b_dtype, args.n, args.k, args.ldb, gemv::kRowsPerWarp,
                                static_cast<int>(kStepBytes / eb), hopper::TmaSwizzle::kNone);
  }
  const gemv::Launch launch{cfg, cfg.path, args.pdl, stream};
  switch (args.mode) {
    case ScaleMode::kBF16: gemv::launch_bf16(p, b_map, launch); break;
    case ScaleMode::kPtpc: gemv::launch_ptpc(p, b_map, launch); break;
    case ScaleMode::kBlockscale: gemv::launch_blockscale(p, b_map, launch); break;
    case ScaleMode::kMxfp8: gemv::launch_mxfp8(p, b_map, launch); break;
  }
}

}  // namespace weave::detail
