// The GEMM planner's tile rule: the tile, grid and K split of a problem on the tiled kernels
// (gemm_plan_tiles), and the tiles built for it (gemm_tile_candidates).
//
//
// Tile rule (wave efficiency): among the built tiles for the mode and output dtype, take the one
// with the least modelled time
//     waves x tile area / efficiency,   waves = ceil(tiles / num_sms)
// (the persistent CTAs run the tiles in waves; a last, partly filled wave costs a whole one).
// efficiency is 1 for 128x128, kSmallTileEfficiency* for 128x64, kHalfRow*TileEfficiency* for the
// 64-row tiles (64x64, 64x128, 64x256: the consumer warpgroups split the columns),
// kMediumTileEfficiencyBf16 for bf16's 128x160 and kLargeTileEfficiency for the
// 32K-element tiles (128x256, 256x128): measured on the H200 with every tile forced (tests/gpu GemmPerf), a
// 256x128 blockscale tile does 1.19-1.30x the work per unit time of 128x128, a bf16 large tile 1.00-1.03x,
// a ptpc one with bf16 output about the same as 128x128 (0.98: ties go to 128x128).
// Ties go to the larger area, then the one that wastes less padding, then the wider-N tile. So a
// grid below the SM count wins where it saves a wave (2048x2048 fp8: 128 tiles of 256x128 in one
// wave beat 256 tiles of 128x128 in two). The persistent grid is min(work items, num_sms). Every
// choice is overridable (GemmPlanOverrides). M <= 32 goes to the decode GEMV when it implements
// the problem.
//
// split-K rule: only where the chosen tile's grid leaves SMs idle (tiles < num_sms; splitting a
// >= 1-wave grid only adds waves of shorter items plus the reduction). There a one-wave kernel
// takes about
//     T(S) = max(bytes / kSmallGridBytesPerS, ceil(k_blocks / S) x step_us(mode, tile))
//            + (S > 1: kSplitReduceUs + 8 S M N / kSplitPartialBytesPerS)
// (the operands' bytes streamed at the rate a partly filled grid reaches, or each CTA's K blocks
// at the time one takes when its stream is not HBM-bound, whichever is longer; a split adds the
// second kernel and its fp32 partials written and read back), and the planner takes the S in
// 1 .. min(num_sms / tiles, K / kMinSplitKElems, kMaxSplitK) with the least T, splitting only where
// that saves kSplitMinSaving. Fitted on the H100 at M 48-192 with every tile and split 1, 2, 4
// forced (docs/perf/gemm.md "Small M"): where 56-64 fp8 tiles already stream the weights near the
// HBM rate a split lost 5-30%, where 10-40 tiles leave the kernel step-bound it won 1.3-2x (the
// rule before, "split whenever 2 x tiles fit the SMs", took both). Partials are fp32 [S, M, N] in
// the workspace, written by the tile's fp32-output instance and summed in split order by a second
// kernel (deterministic).
#include <algorithm>
#include <sstream>

#include "common/check.hpp"
#include "gemm/dispatch.hpp"
#include "gemm/persistent_walk.hpp"
#include "gemm/planner.hpp"
#include "weave/gemm.hpp"

namespace weave {
namespace gemm {


// Relative work per unit time of a 32K-element tile against a 128x128 one (see the tile rule).
// Blockscale (and ptpc before its 128-row tile kept a block in flight while promoting) measured
// 1.19-1.30. ptpc with bf16 output since then (GEMM v2 step 3, docs/perf/gemm.md): 128x128 within
// -8%..+16% of 256x128 at the 12 issue shapes, median +1.5%, so ties go to 128x128; with fp32
// output 256x128 stays 1.06-1.09x faster where both fill the same waves (the larger tile halves the
// epilogue's share), so fp32 keeps the blockscale factor.
constexpr double kLargeTileEfficiencyBlockscale = 1.2;
constexpr double kLargeTileEfficiencyPtpcBf16Out = 0.98;
constexpr double kLargeTileEfficiencyBf16 = 1.02;
// bf16's 128x160 tile (built for the N where 128 and 256 quantise the waves badly, e.g. 1024 x
// 5120: 256 tiles in 1.94 waves instead of 320 in 2.42): measured (GemmPerf, GEMM v2 step 7) at
// 0.88-0.97 of 128x128's work rate over the 12 issue shapes and 3 more (1.0 at 3072x5120x4096);
// 0.96 takes it at 1024x5120x2048 (34.3 us against 39.2 for 128x128) and 3072x5120x4096 (201.0
// against 208.7 for 128x256), not at 2048x5120x2048 (68.3 against 66.2 for 128x128) nor at the
// large shapes, where 128x256 keeps the same waves.
constexpr double kMediumTileEfficiencyBf16 = 0.96;
// The same for the narrow 128x64 tile, measured on the H200 with every tile forced (GemmPerf,
// docs/perf/gemm.md): where both fit in one wave, ptpc's 128x64 ran 1.03-1.23x faster than 128x128
// with twice the tiles (efficiency 0.56-0.62 per tile), so fp8 takes it where it doubles the SMs
// in use; bf16's ran 0.92-1.26x (0.46-0.63), so bf16 counts it at 0.5, which leaves it only where
// it saves a whole wave (a tie goes to the larger tile).
constexpr double kSmallTileEfficiencyFp8 = 0.6;
constexpr double kSmallTileEfficiencyBf16 = 0.5;
// The 64-row tiles, against 128x128 in the same wave count (GemmPerf, every tile forced, GEMM v2
// step 5, docs/perf/gemm.md): a 64x128 tile ran at 0.56-0.61 of 128x128's work rate in bf16 and
// 0.57-0.67 in ptpc, so where M <= 64 (a 128-row tile computes half its rows for nothing) it takes
// 0.81-0.89 of 128x128's time. bf16 counts it at 0.6, above 128x64's 0.5 (measured 9.4 vs 11.9 us at
// 64x8192x1280). fp8 (ptpc, blockscale) at 0.75: on the H100 over the decode shapes at M 48-128
// (docs/perf/gemm.md "Small M"), unsplit, ptpc's 64x128 took 0.73-0.96 of cuBLASLt's time against
// 0.95-1.10 for 128x64 (each streams as many weight bytes per stage as a 128-row tile of twice the
// width: an fp8 stage of 128x64 is two thirds A, mostly rows past M), blockscale's 0.84-1.01 against
// 1.04-1.29; where both fill one wave, 64x128 wins. 64x256 (0.5) never ran faster than 64x128 at
// M <= 128.
constexpr double kHalfRowTileEfficiencyBf16 = 0.6;
constexpr double kHalfRowTileEfficiencyFp8 = 0.75;
constexpr double kHalfRowWideTileEfficiency = 0.5;
// bf16's 64x64 tile (each consumer warpgroup 64 x 32; GemmPerf, GEMM v2 step 7): where it and
// 64x128 both fill one wave it ran 2-6% faster with twice the tiles (64x8192x1280 8.6 against 8.8
// us, 64x2048x8192 14.6 / 15.5, 48x4096x4096 14.2 / 14.7): 0.31-0.32 of 128x128's work rate per
// area. Counted at 0.31, so it wins those ties narrowly and loses wherever it needs one more wave.
constexpr double kHalfRowNarrowTileEfficiencyBf16 = 0.31;
// The largest M the planner gives a 64-row tile (kHalfRowTileMaxM, planner.hpp): the sweep measured
// M <= 128 (a forced tile runs at any M).

std::vector<TileCandidate> gemm_tile_candidates(const GemmProblem& p, int cluster) {
  const ScaleLayout layout = instance_scale_layout(p.mode, p.scale_layout);
  const int cluster_m = cluster == 2 ? 2 : 1;
  std::vector<TileCandidate> out;
  for (const auto& i : gemm_instances()) {
    if (i.mode != p.mode || i.scale_layout != layout || i.out_dtype != p.out_dtype ||
        i.epilogue != EpilogueKind::kStoreLocal || i.cluster_m != cluster_m)
      continue;
    const GemmInstance* f32 =
        find_gemm_instance(p.mode, DType::kF32, i.epilogue, i.block_m, i.block_n, layout, i.cluster_m);
    out.push_back({i.block_m, i.block_n, i.block_k, i.stages, i.name, f32 ? f32->name : "", i.cluster_m});
  }
  return out;
}

// The split-K model (see the rule at the top of this file), fitted on the H100 (docs/perf/gemm.md
// "Small M"): the best one-wave small-M kernels streamed 2.2-2.7 TB/s; a CTA not bound by HBM took
// per 128-byte K block 0.21 us in bf16 64x64, 0.31 in bf16 128x128, 0.26 in ptpc 64x128, 0.35 in
// ptpc 128x128, 0.42 in blockscale 64x128 and 0.51 in blockscale 128x128 (scales applied per K
// block), i.e. a per-mode base plus 0.16 us per 128x128 of tile; mxfp8 keeps the fill rule. The
// reduction: 4.2 us beyond its partials (ptpc 1280 x 8192, M 48, 64x128 at 2 and 4 splits), which
// are written and read back mostly in L2 (counted at kSplitPartialBytesPerS, not measured apart).
constexpr double kSmallGridBytesPerS = 2.6e12;
constexpr double kSplitPartialBytesPerS = 8.0e12;
constexpr double kSplitReduceUs = 4.2;
constexpr double kSplitMinSaving = 0.05;
constexpr double kStepUsPerTile128 = 0.16;

static double split_k_step_us(ScaleMode mode, int block_m, int block_n) {
  const double base = mode == ScaleMode::kBlockscale ? 0.33 : 0.17;  // bf16, ptpc: 0.17
  return base + kStepUsPerTile128 * block_m * block_n / (128.0 * 128.0);
}

double split_k_model_us(const GemmProblem& p, int block_m, int block_n, int64_t k_blocks, int64_t split) {
  const double in = p.mode == ScaleMode::kBF16 ? 2.0 : 1.0, out = static_cast<double>(dtype_bytes(p.out_dtype));
  const double m = static_cast<double>(p.m), n = static_cast<double>(p.n), k = static_cast<double>(p.k);
  const double stream_us = ((m + n) * k * in + m * n * out) / kSmallGridBytesPerS * 1e6;
  const double steps_us =
      static_cast<double>(ceil_div(k_blocks, split)) * split_k_step_us(p.mode, block_m, block_n);
  const double reduce_us =
      split > 1 ? kSplitReduceUs + 8.0 * static_cast<double>(split) * m * n / kSplitPartialBytesPerS * 1e6 : 0.0;
  return std::max(stream_us, steps_us) + reduce_us;
}

static std::string tiles_list(const std::vector<TileCandidate>& c) {
  std::ostringstream os;
  for (size_t i = 0; i < c.size(); ++i) os << (i ? ", " : "") << c[i].block_m << "x" << c[i].block_n;
  return os.str();
}

double tile_cost(const GemmProblem& p, int num_sms, int block_m, int block_n) {
  const double large_eff = p.mode == ScaleMode::kBF16   ? kLargeTileEfficiencyBf16
                           : p.mode == ScaleMode::kPtpc && p.out_dtype == DType::kBF16 ? kLargeTileEfficiencyPtpcBf16Out
                                                                                     : kLargeTileEfficiencyBlockscale;
  const double small_eff = p.mode == ScaleMode::kBF16 ? kSmallTileEfficiencyBf16 : kSmallTileEfficiencyFp8;
  const double half_row_eff = p.mode == ScaleMode::kBF16 ? kHalfRowTileEfficiencyBf16 : kHalfRowTileEfficiencyFp8;
  const int64_t waves = ceil_div(ceil_div(p.m, block_m) * ceil_div(p.n, block_n), num_sms);
  const double area = static_cast<double>(block_m) * block_n;
  const double eff = block_m == 64 ? (block_n == 64    ? kHalfRowNarrowTileEfficiencyBf16
                                      : block_n <= 128 ? half_row_eff
                                                       : kHalfRowWideTileEfficiency)
                     : block_n == 160 ? kMediumTileEfficiencyBf16
                     : area > 128.0 * 128.0 ? large_eff
                     : area < 128.0 * 128.0 ? small_eff
                                            : 1.0;
  return static_cast<double>(waves) * area / eff;
}

GemmPlan gemm_plan_tiles(const GemmProblem& p, int num_sms, const GemmPlanOverrides& o,
                         const std::vector<TileCandidate>& all_cands, SplitRule split_rule) {
  check_plan_limits(num_sms, o);
  // Clusters only where asked for (override 'cluster' = 2): measured no faster (docs/perf/gemm.md).
  const int cluster = o.cluster == 2 ? 2 : 1;
  std::vector<TileCandidate> cands;
  for (const auto& c : all_cands)
    if (c.cluster_m == cluster) cands.push_back(c);
  WEAVE_EXPECT_ARG(cluster == 1 || num_sms >= 2, "override 'cluster' = 2: needs at least 2 SMs (num_sms = " << num_sms << ")");
  WEAVE_EXPECT(cluster == 1 || !cands.empty(), Status::kUnsupported,
               "override 'cluster' = 2: no instance of 2-CTA clusters is built for mode "
                   << to_string(p.mode) << " / " << to_string(p.out_dtype) << " output"
                   << (p.mode == ScaleMode::kBlockscale ? " with this scale_layout (mn-major only)" : ""));
  WEAVE_EXPECT_ARG((o.block_m == 0) == (o.block_n == 0),
                   "override tile: give both block_m and block_n (got " << o.block_m << "x" << o.block_n << ")");
  WEAVE_EXPECT(!cands.empty(), Status::kUnsupported,
               "no GEMM kernel instance is built for mode " << to_string(p.mode) << " with " << to_string(p.out_dtype)
                                                           << " output (is the build narrowed by WEAVE_GEMM_KERNELS?)");
  auto tiles_of = [&](const TileCandidate& c) { return ceil_div(p.m, c.block_m) * ceil_div(p.n, c.block_n); };
  auto waste_of = [&](const TileCandidate& c) {
    return ceil_div(p.m, c.block_m) * c.block_m * ceil_div(p.n, c.block_n) * c.block_n - p.m * p.n;
  };

  const TileCandidate* pick = nullptr;
  std::ostringstream why;
  if (o.block_m != 0) {
    for (const auto& c : cands)
      if (c.block_m == o.block_m && c.block_n == o.block_n) pick = &c;
    WEAVE_EXPECT_ARG(pick != nullptr, "override tile " << o.block_m << "x" << o.block_n << ": not built for mode "
                                                      << to_string(p.mode) << " / " << to_string(p.out_dtype)
                                                      << " output (built: " << tiles_list(cands) << ")");
    why << "tile " << o.block_m << "x" << o.block_n << " (override)";
  } else {
    // Better = larger area, then less padding, then wider N (the tie-break after the model).
    auto better = [&](const TileCandidate& x, const TileCandidate& y) {
      const int64_t ax = int64_t{x.block_m} * x.block_n, ay = int64_t{y.block_m} * y.block_n;
      if (ax != ay) return ax > ay;
      if (waste_of(x) != waste_of(y)) return waste_of(x) < waste_of(y);
      return x.block_n > y.block_n;
    };
    auto waves_of = [&](const TileCandidate& c) { return ceil_div(tiles_of(c), num_sms); };
    auto cost_of = [&](const TileCandidate& c) { return tile_cost(p, num_sms, c.block_m, c.block_n); };
    // 64-row tiles only where they were measured (M <= kHalfRowTileMaxM), unless nothing else is built.
    const bool any_full_rows =
        std::any_of(cands.begin(), cands.end(), [](const TileCandidate& c) { return c.block_m != 64; });
    auto eligible = [&](const TileCandidate& c) { return c.block_m != 64 || p.m <= kHalfRowTileMaxM || !any_full_rows; };
    for (const auto& c : cands) {
      if (!eligible(c)) continue;
      if (pick == nullptr) {
        pick = &c;
        continue;
      }
      const double cc = cost_of(c), cp = cost_of(*pick);
      if (cc < cp * (1 - 1e-9) || (cc <= cp * (1 + 1e-9) && better(c, *pick))) pick = &c;
    }
    why.setf(std::ios::fixed);
    why.precision(2);
    why << "least modelled time: " << tiles_of(*pick) << " tiles in " << waves_of(*pick) << " wave"
        << (waves_of(*pick) == 1 ? "" : "s") << " on " << num_sms << " SMs (wave efficiency "
        << 100.0 * static_cast<double>(tiles_of(*pick)) / static_cast<double>(waves_of(*pick) * num_sms) << "%)";
    for (const auto& c : cands)
      if (&c != pick && !eligible(c))
        why << "; " << c.block_m << "x" << c.block_n << ": only for m <= " << kHalfRowTileMaxM;
      else if (&c != pick)
        why << "; " << c.block_m << "x" << c.block_n << ": " << tiles_of(c) << " tiles, " << waves_of(c)
            << " waves, time x" << cost_of(c) / cost_of(*pick);
  }

  GemmPlan plan;
  plan.block_m = pick->block_m;
  plan.block_n = pick->block_n;
  plan.block_k = pick->block_k;
  plan.stages = pick->stages;
  plan.cluster = pick->cluster_m;
  plan.tiles = tiles_of(*pick);
  plan.kernel = pick->kernel;
  plan.group_rows = o.group_rows > 0 ? o.group_rows : kDefaultGroupRows;

  // split-K (see the rule at the top of this file).
  const int64_t k_blocks = ceil_div(p.k, pick->block_k);
  int64_t split = 1;
  double unsplit_us = 0, split_us = 0;  // the split-K model's times, where it chose
  if (o.split_k >= 2) {
    WEAVE_EXPECT(!pick->split_kernel.empty(), Status::kUnsupported,
                 "override 'split_k' = " << o.split_k << ": split-K writes fp32 partials, and no fp32-output instance of tile "
                                         << pick->block_m << "x" << pick->block_n << " is built for mode "
                                         << to_string(p.mode));
    WEAVE_EXPECT_ARG(o.split_k <= k_blocks, "override 'split_k' = " << o.split_k << ": K = " << p.k << " has only "
                                                                    << k_blocks << " K blocks of " << pick->block_k
                                                                    << " (each split needs at least one)");
    split = o.split_k;
  } else if (o.split_k == 0 && plan.tiles < num_sms && !pick->split_kernel.empty()) {
    const int64_t most = std::min<int64_t>({num_sms / plan.tiles, p.k / kMinSplitKElems, kMaxSplitK, k_blocks});
    if (split_rule == SplitRule::kFillSms || p.mode == ScaleMode::kMxfp8) {
      split = most;
    } else {
      unsplit_us = split_us = split_k_model_us(p, pick->block_m, pick->block_n, k_blocks, 1);
      for (int64_t s = 2; s <= most; ++s)
        if (const double t = split_k_model_us(p, pick->block_m, pick->block_n, k_blocks, s); t < split_us)
          split_us = t, split = s;
      if (split_us > unsplit_us * (1 - kSplitMinSaving)) split = 1, split_us = unsplit_us;
    }
  }
  if (split >= 2) {
    // Normalise so that every split holds at least one K block.
    const int64_t per = split_k_blocks_per_split(k_blocks, static_cast<int>(split));
    split = ceil_div(k_blocks, per);
  }
  if (split >= 2 && split * p.m >= (int64_t{1} << 31)) {
    WEAVE_EXPECT_ARG(o.split_k < 2, "override 'split_k' = " << o.split_k << ": split_k x m must be < 2^31 (partial rows "
                                                            << "are 32-bit indices)");
    split = 1;
  }
  plan.split_k = static_cast<int>(std::max<int64_t>(split, 1));
  // A cluster pair walks row blocks rounded up to even (gemm/persistent_walk.hpp cluster_pair_rows).
  const int64_t row_blocks = ceil_div(p.m, pick->block_m);
  const int64_t items = (plan.cluster == 2 ? cluster_pair_rows(static_cast<int>(row_blocks)) : row_blocks) *
                        ceil_div(p.n, pick->block_n) * plan.split_k;
  if (plan.split_k > 1) {
    plan.kernel = pick->split_kernel;
    why << "; split-K " << plan.split_k << (o.split_k >= 2 ? " (override)" : "") << ": " << plan.tiles << " tiles x "
        << plan.split_k << " K splits of " << split_k_blocks_per_split(k_blocks, plan.split_k) << " K blocks = " << items
        << " work items (fp32 partials in the workspace, summed in split order by a second kernel)";
    if (unsplit_us > 0) why << "; modelled " << split_us << " us against " << unsplit_us << " unsplit";
  } else if (o.split_k == 0 && plan.tiles < num_sms) {
    why << "; no split-K (";
    if (pick->split_kernel.empty())
      why << "no fp32-output instance of this tile is built";
    else if (num_sms / plan.tiles < 2)
      why << "2 x " << plan.tiles << " tiles would exceed the " << num_sms << " SMs";
    else if (p.k < 2 * kMinSplitKElems)
      why << "K = " << p.k << " < 2 x " << kMinSplitKElems;
    else
      why << "modelled " << unsplit_us << " us unsplit, no split saves " << 100 * kSplitMinSaving
          << "%: the tiles already stream near the HBM rate";
    why << ")";
  }
  if (o.grid > 0) {
    plan.grid = o.grid;
    why << "; grid " << o.grid << " (override)";
  } else {
    // Clusters: whole pairs (the items are even).
    plan.grid = static_cast<int>(std::min<int64_t>(items, num_sms - num_sms % plan.cluster));
    why << "; grid " << plan.grid << " persistent CTAs, " << std::fixed;
    why.precision(2);
    why << static_cast<double>(items) / plan.grid << (plan.split_k > 1 ? " work items each" : " tiles each");
  }
  if (plan.cluster == 2)
    why << "; 2-CTA clusters (override): each pair of CTAs takes vertically adjacent tiles and loads their B "
           "tile once, multicast to both"
        << (row_blocks % 2 != 0 ? " (the odd last row block's partner is an empty tile)" : "");
  plan.reason = why.str();
  return plan;
}

}  // namespace gemm
}  // namespace weave
