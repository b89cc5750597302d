#include "fused/all_gather/plan.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "comm/protocol.hpp"
#include "common/check.hpp"
#include "fused/config_rules.hpp"
#include "fused/model_rates.hpp"
#include "fused/all_gather/schedule.hpp"
#include "gemm/planner.hpp"
#include "weave/gemm.hpp"

namespace weave {

std::string_view to_string(GemmAllGatherMode m) noexcept {
  switch (m) {
    case GemmAllGatherMode::kAuto: return "auto";
    case GemmAllGatherMode::kGemmOnly: return "gemm-only";
    case GemmAllGatherMode::kSplitNccl: return "split-nccl";
    case GemmAllGatherMode::kSplitLsa: return "split-lsa";
    case GemmAllGatherMode::kSplitCe: return "split-ce";
    case GemmAllGatherMode::kFusedLsa: return "fused-lsa";
    case GemmAllGatherMode::kFusedCe: return "fused-ce";
  }
  return "?";
}

std::optional<GemmAllGatherMode> parse_gemm_all_gather_mode(std::string_view name) noexcept {
  for (auto m : {GemmAllGatherMode::kAuto, GemmAllGatherMode::kGemmOnly, GemmAllGatherMode::kSplitNccl,
                 GemmAllGatherMode::kSplitLsa, GemmAllGatherMode::kSplitCe, GemmAllGatherMode::kFusedLsa,
                 GemmAllGatherMode::kFusedCe})
    if (name == to_string(m)) return m;
  return std::nullopt;
}

std::string GemmAllGather::validate(const GemmAllGatherConfig& c, int world) {
  fused::ConfigRules rules;
  auto rule = [&](bool ok, const std::string& why) { rules.rule(ok, why); };
  rules.world_and_sizes(world, c.m_max, c.max_sms);
  rules.out_dtype(c.quant, c.out_dtype);
  if (c.n >= 1 && c.k >= 1 && c.m_max >= 1) {
    GemmProblem p{.m = c.m_max, .n = c.n, .k = c.k, .mode = c.quant, .scale_layout = c.scale_layout, .out_dtype = c.out_dtype};
    const std::string g = gemm_validate_problem(p);
    rule(g.empty(), "the per-rank GEMM [m_max, N, K] = [" + std::to_string(c.m_max) + ", " + std::to_string(c.n) + ", " +
                        std::to_string(c.k) + "]: " + g);
  } else {
    rule(c.n >= 1, "n must be >= 1, got " + std::to_string(c.n));
    rule(c.k >= 1, "k must be >= 1, got " + std::to_string(c.k));
  }
  // The output rows of rank s start at s * m * N elements: 16-byte aligned for the TMA stores.
  rule(c.n % 8 == 0, "n must be a multiple of 8 (every rank's rows start 16-byte aligned in the output), got " +
                         std::to_string(c.n));
  const double bytes = double(world) * double(c.m_max) * double(c.n) * (c.out_dtype == DType::kF32 ? 4 : 2);
  rule(bytes <= double(int64_t(1) << 40), "the output world * m_max * N is over 1 TiB");
  return rules.str();
}

}  // namespace weave

namespace weave::fused {

GemmAllGatherMode gag_split_mode(GemmAllGatherMode mode) {
  switch (mode) {
    case GemmAllGatherMode::kAuto:
    case GemmAllGatherMode::kSplitLsa: return GemmAllGatherMode::kSplitLsa;
    case GemmAllGatherMode::kSplitCe: return GemmAllGatherMode::kSplitCe;
    default: return GemmAllGatherMode::kAuto;  // none hosted
  }
}

GagCapabilities gag_capabilities(const GemmAllGatherConfig& cfg, const Placement& at) {
  GagCapabilities c;
  const int w = at.world;
  c.hosts_fused = cfg.mode == GemmAllGatherMode::kAuto || cfg.mode == GemmAllGatherMode::kFusedLsa ||
                  cfg.mode == GemmAllGatherMode::kFusedCe;
  c.hosted_split = w > 1 ? gag_split_mode(cfg.mode) : GemmAllGatherMode::kAuto;
  c.pulls = cfg.mode == GemmAllGatherMode::kFusedCe && w > 1;
  c.mx_bf16_route = cfg.quant == ScaleMode::kMxfp8 && cfg.mx_route != MxRoute::kNative &&
                    cfg.mode != GemmAllGatherMode::kFusedCe;
  c.fused = at.fused_kernel && at.nvlink_domain;
  c.split = gag_split_mode(cfg.mode);
  c.plan_mode = cfg.mode;
  if (cfg.mode == GemmAllGatherMode::kAuto && !at.nvlink_domain && w > 1) {
    c.split = GemmAllGatherMode::kSplitNccl;  // every call: the ranks share no NVLink domain
    c.plan_mode = GemmAllGatherMode::kSplitNccl;
  }
  std::ostringstream why;
  const std::string mode = "GemmAllGather: mode " + std::string(to_string(cfg.mode));
  switch (cfg.mode) {
    case GemmAllGatherMode::kFusedCe:
    case GemmAllGatherMode::kFusedLsa:
      if (!at.fused_kernel) {
        why << mode << ": no fused kernel for " << to_string(cfg.quant) << " -> " << to_string(cfg.out_dtype)
            << " in this build";
        break;
      }
      [[fallthrough]];
    case GemmAllGatherMode::kSplitLsa:
    case GemmAllGatherMode::kSplitCe:
      // fused-ce too: the pulls read the peers' windows at the addresses the window maps.
      if (!at.nvlink_domain) why << mode << " needs every rank in one NVLink domain (" << domain_ranks_phrase(at) << ")";
      break;
    case GemmAllGatherMode::kSplitNccl:
      if (!at.nccl) why << "GemmAllGather: mode split-nccl needs an NCCL communicator; " << at.group << " has none";
      break;
    case GemmAllGatherMode::kAuto:
      if (!at.nvlink_domain && !at.nccl)
        why << "GemmAllGather: ranks are not in one NVLink domain and there is no NCCL communicator";
      break;
    case GemmAllGatherMode::kGemmOnly: break;
  }
  c.unavailable = why.str();
  return c;
}

comm::OpShape gag_split_shape(const GemmAllGatherConfig& cfg, int world, int max_blocks) {
  comm::OpShape s;
  s.op = CollectiveOp::kAllGather;
  const bool ce = gag_split_mode(cfg.mode) == GemmAllGatherMode::kSplitCe;
  s.algorithm = ce ? Algorithm::kPush : Algorithm::kAuto;
  s.world = world;
  s.elem_bytes = 1;
  s.max_count = static_cast<size_t>(cfg.m_max) * static_cast<size_t>(cfg.n) * (cfg.out_dtype == DType::kF32 ? 4 : 2);
  s.max_blocks = max_blocks;
  s.ll_max_count = comm::ll_max_count_for(ce ? Transport::kCe : Transport::kLsa, s.algorithm, s.max_count, 1);
  s.external_buffers = true;
  return s;
}

GagLayout add_gag_regions(WindowLayout& layout, const GemmAllGatherConfig& cfg, int world, int split_max_blocks,
                          int ctas, const std::string& prefix) {
  GagLayout g;
  const size_t w = static_cast<size_t>(world);
  g.control = layout.add(prefix + ".control", RegionKind::kControl, comm::kControlBytes).offset;
  g.credits = layout.add(prefix + ".credits", RegionKind::kCredits, 4 * w).offset;
  g.flags = layout.add(prefix + ".flags", RegionKind::kFlags, 4 * size_t(comm::kFlagPhases) * w * comm::kMaxChunks).offset;
  g.out_bytes = w * static_cast<uint64_t>(cfg.m_max) * static_cast<uint64_t>(cfg.n) * (cfg.out_dtype == DType::kF32 ? 4 : 2);
  g.out = layout.add(prefix + ".out", RegionKind::kData, g.out_bytes).offset;
  g.partials_bytes = gag_partials_bytes(cfg, ctas);  // local only: no peer reads or writes it
  if (g.partials_bytes > 0) g.partials = layout.add(prefix + ".partials", RegionKind::kData, g.partials_bytes).offset;
  if (gag_capabilities(cfg, world_only(world)).hosted_split != GemmAllGatherMode::kAuto) {  // mode-only part
    g.split = comm::add_op_regions(layout, prefix + ".split", gag_split_shape(cfg, world, split_max_blocks));
    g.has_split = true;
  }
  return g;
}

GagRates gag_rates(ScaleMode quant) {
  GagRates r;
  r.gemm_tflops = modelled_gemm_tflops(quant);
  return r;
}

GemmAllGatherPlan gag_plan(const GemmAllGatherConfig& cfg, int world, int64_t m, int ctas, bool fused_available,
                           bool nccl_available, uint64_t window_bytes, const Calibration* cal) {
  const GemmPlan tile = gag_tile_plan(cfg, m, ctas, gag_tile_candidates(cfg));
  return gag_plan(cfg, world, m, ctas, fused_available, nccl_available, window_bytes, cal, tile,
                  ag_chunks(m, cfg.n, tile.block_m, tile.block_n), gag_split_leg(cfg, m, ctas, true));
}

uint64_t gag_partials_bytes(const GemmAllGatherConfig& cfg, int ctas) {
  if (gag_fused_mode(cfg.mode) || cfg.quant == ScaleMode::kMxfp8) return 0;
  const GemmProblem p{.m = cfg.m_max, .n = cfg.n, .k = cfg.k, .mode = cfg.quant, .scale_layout = cfg.scale_layout,
                      .out_dtype = cfg.out_dtype};
  return split_k_partials_bound(p, ctas);
}

SplitGemmLeg gag_split_leg(const GemmAllGatherConfig& cfg, int64_t m, int ctas, bool gemv_room, bool use,
                           FusedTile forced) {
  if (!use || forced.forced() || gag_fused_mode(cfg.mode)) return {};
  const GemmProblem p{.m = m, .n = cfg.n, .k = cfg.k, .mode = cfg.quant, .scale_layout = cfg.scale_layout,
                      .out_dtype = cfg.out_dtype};
  return plan_split_gemm_leg(p, ctas, SplitLegRoom{.gemv = gemv_room, .scratch_bytes = gag_partials_bytes(cfg, ctas)});
}

GemmAllGatherPlan gag_plan(const GemmAllGatherConfig& cfg, int world, int64_t m, int ctas, bool fused_available,
                           bool nccl_available, uint64_t window_bytes, const Calibration* cal, const GemmPlan& tile,
                           const AgChunks& ch, const SplitGemmLeg& leg) {
  GemmAllGatherPlan p;
  const size_t ob = cfg.out_dtype == DType::kF32 ? 4 : 2;
  p.block_m = tile.block_m;
  p.block_n = tile.block_n;
  p.tiles = int64_t(ch.m_blocks) * ch.n_blocks;
  p.grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ctas, p.tiles)));
  p.waves = double(p.tiles) / std::max(1, ctas);
  p.chunks = ch.chunks;
  p.bytes_per_peer = m * cfg.n * static_cast<int64_t>(ob);
  p.window_bytes = static_cast<int64_t>(window_bytes);
  const GagRates r = gag_rates(cfg.quant);
  p.model_gemm_us = 2.0 * double(m) * double(cfg.n) * double(cfg.k) / (r.gemm_tflops * 1e6);
  p.model_comm_us = world > 1 ? double(world - 1) * double(p.bytes_per_peer) / (r.link_gbps * 1e3) + r.comm_latency_us : 0;
  p.model_split_us = p.model_gemm_us + p.model_comm_us;
  // Fused: the broadcast runs under the GEMM; what is left is the last wave's tiles to every peer.
  const double last_wave_bytes = double(std::min<int64_t>(p.tiles, ctas)) * p.block_m * p.block_n * double(ob);
  const double tail_us = world > 1 ? double(world - 1) * last_wave_bytes / (r.link_gbps * 1e3) + 4 : 0;
  p.model_fused_us = std::max(p.model_gemm_us, p.model_comm_us - r.comm_latency_us) + tail_us;
  if (cfg.mode == GemmAllGatherMode::kFusedCe && world > 1) {
    // fused-ce: each peer's copy stream pulls the chunks as they complete, one chain after another.
    // The tile order (row blocks in groups of group_rows, each group walked down its rows and then
    // along N) completes a group's chunks together at its last column, the last group's at the
    // GEMM's end: their chains run after it.
    const int group_rows = std::min(gemm::kDefaultGroupRows, ch.m_blocks);  // the tile plan's (gemm_plan_tiles)
    const int last_chunks = std::min(ch.chunks, (group_rows + ch.per - 1) / ch.per);
    const double chunk_bytes = double(p.bytes_per_peer) / ch.chunks;
    const double ce_us = double(world - 1) * double(p.bytes_per_peer) / (kModelledCeLinkGbps * 1e3);
    p.model_fused_us = std::max(p.model_gemm_us, ce_us) +
                       last_chunks * (kModelledCeChainUs + chunk_bytes / (kModelledCeLinkGbps * 1e3));
  }
  std::ostringstream why;
  auto split_pick = [&] {
    const GemmAllGatherMode s = gag_split_mode(cfg.mode);
    return s == GemmAllGatherMode::kAuto ? GemmAllGatherMode::kSplitLsa : s;
  };
  // The calibration's measured best, where this op can run it here (auto hosts split-lsa and
  // fused-lsa); anything else falls through to the model.
  std::optional<GemmAllGatherMode> measured;
  if (cal != nullptr && cfg.mode == GemmAllGatherMode::kAuto && world > 1) {
    if (const auto best = cal->best_for(m)) {
      const auto mode = parse_gemm_all_gather_mode(*best);
      if (mode == GemmAllGatherMode::kSplitLsa || (mode == GemmAllGatherMode::kFusedLsa && fused_available))
        measured = mode;
    }
  }
  switch (cfg.mode) {
    case GemmAllGatherMode::kAuto:
      if (world == 1) {
        p.mode = GemmAllGatherMode::kGemmOnly;
        why << "world 1: nothing to gather";
      } else if (measured) {
        p.mode = *measured;
        why << "calibration " << cal->source << (cal->where.empty() ? "" : " (" + cal->where + ")")
            << ": measured fastest near m = " << m;
      } else if (!fused_available) {
        p.mode = split_pick();
        why << "fused kernel not available for " << to_string(cfg.quant) << " -> " << to_string(cfg.out_dtype)
            << "; split";
      } else if (p.waves < kGagMinFusedWaves) {
        // Under 1.5 waves the first finished tiles leave with most of the GEMM already done.
        p.mode = split_pick();
        why << p.waves << " waves of " << p.block_m << "x" << p.block_n << " tiles (< " << kGagMinFusedWaves
            << "): too little GEMM to hide the gather under; split";
      } else if (p.model_fused_us * 1.05 > p.model_split_us) {
        p.mode = split_pick();
        why << "modelled fused " << p.model_fused_us << " us is not 5% under split " << p.model_split_us << " us";
      } else {
        p.mode = GemmAllGatherMode::kFusedLsa;
        why << p.waves << " waves; modelled fused " << p.model_fused_us << " us vs split " << p.model_split_us << " us";
      }
      break;
    default:
      p.mode = cfg.mode;
      why << "mode " << to_string(cfg.mode) << " requested";
      if (cfg.mode == GemmAllGatherMode::kSplitNccl && !nccl_available) why << " (unavailable: no NCCL communicator)";
      break;
  }
  if (leg.kind != SplitLegKind::kTiles && !gag_fused_mode(p.mode)) {
    p.gemm_gemv = leg.kind == SplitLegKind::kGemv;
    p.gemm_split_k = leg.kind == SplitLegKind::kSplitK ? leg.plan.split_k : 1;
    why << "; " << leg.note;
  }
  p.reason = why.str();
  return p;
}

}  // namespace weave::fused

namespace weave {
std::size_t gemm_all_gather_window_bytes(const GemmAllGatherConfig& config, int world) {
  const std::string bad = GemmAllGather::validate(config, world);
  WEAVE_EXPECT_ARG(bad.empty(), "gemm_all_gather_window_bytes: " << bad);
  WindowLayout layout;
  fused::add_gag_regions(layout, config, world, fused::kGagBoundSplitBlocks, fused::kGagBoundCtas);
  return layout.total_bytes();
}
}  // namespace weave
