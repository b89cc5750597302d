#include "fused/ag_gemm/plan.hpp"

#include <algorithm>
#include <sstream>

#include "comm/protocol.hpp"
#include "comm/transport_build.hpp"
#include "common/check.hpp"
#include "fused/config_rules.hpp"
#include "fused/model_rates.hpp"
#include "fused/split_gemm_leg.hpp"
#include "gemm/dispatch.hpp"
#include "gemm/planner.hpp"

namespace weave {

std::string_view to_string(AllGatherGemmMode m) noexcept {
  switch (m) {
    case AllGatherGemmMode::kAuto: return "auto";
    case AllGatherGemmMode::kGemmOnly: return "gemm-only";
    case AllGatherGemmMode::kSplitNccl: return "split-nccl";
    case AllGatherGemmMode::kSplitLsa: return "split-lsa";
    case AllGatherGemmMode::kSplitCe: return "split-ce";
    case AllGatherGemmMode::kFusedCe: return "fused-ce";
  }
  return "?";
}

std::optional<AllGatherGemmMode> parse_all_gather_gemm_mode(std::string_view name) noexcept {
  for (auto m : {AllGatherGemmMode::kAuto, AllGatherGemmMode::kGemmOnly, AllGatherGemmMode::kSplitNccl,
                 AllGatherGemmMode::kSplitLsa, AllGatherGemmMode::kSplitCe, AllGatherGemmMode::kFusedCe})
    if (name == to_string(m)) return m;
  return std::nullopt;
}

std::string AllGatherGemm::validate(const AllGatherGemmConfig& c, int world) {
  fused::ConfigRules rules;
  auto rule = [&](bool ok, const std::string& why) { rules.rule(ok, why); };
  rules.world_and_sizes(world, c.m_max, c.max_sms);
  rules.out_dtype(c.quant, c.out_dtype);
  rule(c.scale_layout == ScaleLayout::kRaw,
       "scale_layout must be raw: A's scales travel with their rows, and " + std::string(to_string(c.scale_layout)) +
           " interleaves the rows of several ranks (got " + std::string(to_string(c.scale_layout)) + ")");
  rule(c.quant == ScaleMode::kMxfp8 || c.mx_route == MxRoute::kAuto, "mx_route applies to quant mxfp8 only");
  rule(c.mode != AllGatherGemmMode::kFusedCe || fused::agm_fused_ce_quant(c.quant, c.out_dtype),
       "mode fused-ce runs quant bf16, ptpc and blockscale with bf16 output (its GEMM reads A's scales as they "
       "land, without a pre-pass), got " + std::string(to_string(c.quant)) + " -> " + std::string(to_string(c.out_dtype)));
  if (c.n >= 1 && c.k >= 1 && c.m_max >= 1 && world >= 1 && world <= kMaxWorld) {
    GemmProblem p{.m = world * c.m_max, .n = c.n, .k = c.k, .mode = c.quant, .scale_layout = c.scale_layout,
                  .out_dtype = c.out_dtype};
    for (const std::string& g : gemm::gemm_problem_violations(p))
      rule(false, "the gathered GEMM [world x m_max, N, K] = [" + std::to_string(p.m) + ", " + std::to_string(c.n) +
                      ", " + std::to_string(c.k) + "]: " + g);
  } else {
    rule(c.n >= 1, "n must be >= 1, got " + std::to_string(c.n));
    rule(c.k >= 1, "k must be >= 1, got " + std::to_string(c.k));
  }
  // Rank s's scale rows start at s m (K/32) bytes, and the mxfp8 kernels read them 4 bytes at a time.
  rule(c.quant != ScaleMode::kMxfp8 || c.k % 128 == 0,
       "mxfp8 needs k a multiple of 128 (every rank's scale rows, K/32 bytes each, start 4-byte aligned in the "
       "gathered scales), got " + std::to_string(c.k));
  const double bytes = double(world) * double(c.m_max) *
                       (double(c.n) * (c.out_dtype == DType::kF32 ? 4 : 2) + double(c.k) * (c.quant == ScaleMode::kBF16 ? 2 : 1));
  rule(bytes <= double(int64_t(1) << 40), "the gathered A and the output (world x m_max rows) are over 1 TiB");
  return rules.str();
}

}  // namespace weave

namespace weave::fused {

std::int64_t agm_elem_bytes(const AllGatherGemmConfig& cfg) { return cfg.quant == ScaleMode::kBF16 ? 2 : 1; }

const gemm::GemmKernelEntry<AgmRowsParams>* agm_fused_kernel(const AllGatherGemmConfig& cfg, int block_m, int block_n) {
  if (!agm_fused_ce_quant(cfg.quant, cfg.out_dtype)) return nullptr;
  return gemm::find_gemm_kernel<AgmRowsParams>(cfg.quant, cfg.out_dtype, gemm::EpilogueKind::kAgmRows, block_m,
                                               block_n, gemm::instance_scale_layout(cfg.quant, cfg.scale_layout),
                                               gemm::SchedulerKind::kRotatedRows);
}

namespace {
GemmProblem gathered_problem(const AllGatherGemmConfig& c, int world, int64_t m) {
  return GemmProblem{.m = int64_t(world) * m, .n = c.n, .k = c.k, .mode = c.quant, .scale_layout = c.scale_layout,
                     .out_dtype = c.out_dtype};
}
}  // namespace

std::vector<gemm::TileCandidate> agm_tile_candidates(const AllGatherGemmConfig& c) {
  return fused_tile_candidates(gathered_problem(c, 1, c.m_max),
                               [&](int bm, int bn) { return agm_fused_kernel(c, bm, bn) != nullptr; });
}

bool agm_fused_built(const AllGatherGemmConfig& c) {
  return any_fused_kernel(agm_tile_candidates(c), [&](int bm, int bn) { return agm_fused_kernel(c, bm, bn); });
}

std::string agm_fused_kernel_names(const AllGatherGemmConfig& c) {
  return fused_kernel_names(agm_tile_candidates(c), [&](int bm, int bn) { return agm_fused_kernel(c, bm, bn); });
}

GemmPlan agm_tile_plan(const AllGatherGemmConfig& c, int world, int64_t m, int ctas,
                       const std::vector<gemm::TileCandidate>& cands, FusedTile forced) {
  return fused_tile_plan(gathered_problem(c, world, m), ctas, cands, forced);
}

bool agm_fused_ce_quant(ScaleMode quant, DType out_dtype) {
  return out_dtype == DType::kBF16 &&
         (quant == ScaleMode::kBF16 || quant == ScaleMode::kPtpc || quant == ScaleMode::kBlockscale);
}

std::int64_t agm_scale_row_bytes(const AllGatherGemmConfig& cfg) {
  switch (cfg.quant) {
    case ScaleMode::kPtpc: return 4;
    case ScaleMode::kBlockscale: return 4 * (cfg.k / 128);
    case ScaleMode::kMxfp8: return cfg.k / 32;
    default: return 0;
  }
}

namespace {
AllGatherGemmMode hosted_split_of(AllGatherGemmMode mode) {
  switch (mode) {
    case AllGatherGemmMode::kAuto:
    case AllGatherGemmMode::kSplitLsa: return AllGatherGemmMode::kSplitLsa;
    case AllGatherGemmMode::kSplitCe: return AllGatherGemmMode::kSplitCe;
    default: return AllGatherGemmMode::kAuto;  // none hosted
  }
}
}  // namespace

std::optional<Calibration> agm_calibration(const AllGatherGemmConfig& cfg, int world) {
  return auto_calibration(cfg.calibration, to_string(cfg.mode), "AllGatherGemmConfig.calibration", "ag-gemm", cfg.quant,
                          cfg.scale_layout, cfg.out_dtype, cfg.n, cfg.k, world);
}

bool agm_auto_hosts_fused_ce(const AllGatherGemmConfig& cfg, int world, const Calibration* cal) {
  return cfg.mode == AllGatherGemmMode::kAuto && world > 1 && cal != nullptr &&
         cal->names(to_string(AllGatherGemmMode::kFusedCe)) && agm_fused_ce_quant(cfg.quant, cfg.out_dtype) &&
         comm::transport_compiled_in(Transport::kCe);
}

AgmCapabilities agm_capabilities(const AllGatherGemmConfig& cfg, const Placement& at, const Calibration* cal) {
  AgmCapabilities c;
  const int w = at.world;
  c.hosted_split = w > 1 ? hosted_split_of(cfg.mode) : AllGatherGemmMode::kAuto;
  c.mx_bf16_route = cfg.quant == ScaleMode::kMxfp8 && cfg.mx_route != MxRoute::kNative;
  // fused-ce's landed words and copy streams: its mode, or auto whose table names it.
  c.hosts_fused = cfg.mode == AllGatherGemmMode::kFusedCe || agm_auto_hosts_fused_ce(cfg, w, cal);
  c.pulls = c.hosts_fused && w > 1;
  c.fused = at.fused_kernel && at.nvlink_domain;
  c.split = hosted_split_of(cfg.mode);
  c.plan_mode = cfg.mode;
  if (cfg.mode == AllGatherGemmMode::kAuto && !at.nvlink_domain && w > 1) {
    c.split = AllGatherGemmMode::kSplitNccl;  // every call: the ranks share no NVLink domain
    c.plan_mode = AllGatherGemmMode::kSplitNccl;
  }
  std::ostringstream why;
  const std::string mode = "AllGatherGemm: mode " + std::string(to_string(cfg.mode));
  switch (cfg.mode) {
    case AllGatherGemmMode::kFusedCe:
      if (!at.fused_kernel) {
        why << mode << ": no fused-ce GEMM kernel for " << to_string(cfg.quant) << " -> " << to_string(cfg.out_dtype)
            << " in this build";
        break;
      }
      [[fallthrough]];
    case AllGatherGemmMode::kSplitLsa:
    case AllGatherGemmMode::kSplitCe:
      if (!at.nvlink_domain) why << mode << " needs every rank in one NVLink domain (" << domain_ranks_phrase(at) << ")";
      break;
    case AllGatherGemmMode::kSplitNccl:
      if (!at.nccl) why << "AllGatherGemm: mode split-nccl needs an NCCL communicator; " << at.group << " has none";
      break;
    case AllGatherGemmMode::kAuto:
      if (!at.nvlink_domain && !at.nccl)
        why << "AllGatherGemm: ranks are not in one NVLink domain and there is no NCCL communicator";
      break;
    case AllGatherGemmMode::kGemmOnly: break;
  }
  c.unavailable = why.str();
  return c;
}

comm::OpShape agm_split_shape(const AllGatherGemmConfig& cfg, int world, int max_blocks, bool scales) {
  comm::OpShape s;
  s.op = CollectiveOp::kAllGather;
  const bool ce = hosted_split_of(cfg.mode) == AllGatherGemmMode::kSplitCe;
  s.algorithm = ce ? Algorithm::kPush : Algorithm::kAuto;
  s.world = world;
  s.elem_bytes = 1;
  const int64_t row_bytes = scales ? agm_scale_row_bytes(cfg) : cfg.k * agm_elem_bytes(cfg);
  s.max_count = static_cast<size_t>(cfg.m_max) * static_cast<size_t>(row_bytes);
  s.max_blocks = max_blocks;
  s.ll_max_count = comm::ll_max_count_for(ce ? Transport::kCe : Transport::kLsa, s.algorithm, s.max_count, 1);
  s.external_buffers = true;
  return s;
}

AgmLayout add_agm_regions(WindowLayout& layout, const AllGatherGemmConfig& cfg, int world, int split_max_blocks,
                          const std::string& prefix, const Calibration* cal) {
  AgmLayout g;
  const uint64_t rows = static_cast<uint64_t>(world) * static_cast<uint64_t>(cfg.m_max);
  g.control = layout.add(prefix + ".control", RegionKind::kControl, comm::kControlBytes).offset;
  g.credits = layout.add(prefix + ".credits", RegionKind::kCredits, 4 * size_t(world)).offset;
  g.flags = layout.add(prefix + ".flags", RegionKind::kFlags, 4 * size_t(comm::kFlagPhases) * world).offset;
  g.a = layout.add(prefix + ".a", RegionKind::kData, rows * static_cast<uint64_t>(cfg.k * agm_elem_bytes(cfg))).offset;
  const int64_t srb = agm_scale_row_bytes(cfg);
  if (srb > 0) g.sa = layout.add(prefix + ".sa", RegionKind::kData, rows * static_cast<uint64_t>(srb)).offset;
  g.out = layout.add(prefix + ".out", RegionKind::kData,
                     rows * static_cast<uint64_t>(cfg.n) * (cfg.out_dtype == DType::kF32 ? 4 : 2)).offset;
  if (agm_capabilities(cfg, world_only(world), cal).hosts_fused)  // mode-only part
    g.landed = layout.add(prefix + ".landed", RegionKind::kData, 4 * agm_landed_words(world)).offset;
  if (agm_capabilities(cfg, world_only(world)).hosted_split != AllGatherGemmMode::kAuto) {  // mode-only part
    g.split_a = comm::add_op_regions(layout, prefix + ".split.a", agm_split_shape(cfg, world, split_max_blocks, false));
    g.has_split = true;
    if (srb > 0) {
      g.split_sa = comm::add_op_regions(layout, prefix + ".split.sa", agm_split_shape(cfg, world, split_max_blocks, true));
      g.has_split_scales = true;
    }
  }
  return g;
}

AgmGemm agm_gemm(const AllGatherGemmConfig& cfg, int world, int64_t m, int ctas) {
  AgmGemm g;
  g.problem = GemmProblem{.m = world * m, .n = cfg.n, .k = cfg.k, .mode = cfg.quant, .scale_layout = cfg.scale_layout,
                          .out_dtype = cfg.out_dtype};
  GemmPlanOverrides base;
  base.mx_route = cfg.mx_route;  // the planner's K split: agm_gemm_workspace_bytes holds its partials
  g.plan = gemm_plan(g.problem, ctas, base);
  if (g.plan.gemv) {  // the decode GEMV: its own launch shape, no tile to force
    g.overrides = base;
    return g;
  }
  // The tiled plan for `ctas` SMs, pinned, so a weave::Gemm on a device of more SMs runs it as planned.
  g.overrides = base;
  g.overrides.block_m = g.plan.block_m;
  g.overrides.block_n = g.plan.block_n;
  g.overrides.grid = g.plan.grid;
  g.overrides.group_rows = g.plan.group_rows;
  g.overrides.split_k = g.plan.split_k;
  if (cfg.quant == ScaleMode::kMxfp8) g.overrides.mx_route = g.plan.mx_dequant ? MxRoute::kBf16 : MxRoute::kNative;
  if (cfg.quant == ScaleMode::kBlockscale)
    g.overrides.scale_a_route = g.plan.scale_a_mn_copy ? ScaleARoute::kMnMajorCopy : ScaleARoute::kAsGiven;
  return g;
}

std::size_t agm_gemm_workspace_bytes(const AllGatherGemmConfig& cfg, int world, int ctas) {
  // Every route a call may take, at the largest call (the layout grows with M), and after them the
  // most K-split partials any call's plan asks for (weave::Gemm's workspace puts them last).
  GemmPlan all;
  all.mx_dequant = cfg.quant == ScaleMode::kMxfp8;
  all.scale_a_mn_copy = cfg.quant == ScaleMode::kBlockscale;
  all.split_k = 1;
  const GemmProblem p{.m = world * cfg.m_max, .n = cfg.n, .k = cfg.k, .mode = cfg.quant,
                      .scale_layout = cfg.scale_layout, .out_dtype = cfg.out_dtype};
  return gemm_workspace_bytes(p, all) + split_k_partials_bound(p, ctas);
}

namespace {
// The table's measured best near m, where it is a mode auto takes (split-lsa, or fused-ce where it runs).
std::optional<AllGatherGemmMode> measured_mode(int64_t m, const Calibration* cal, bool fused_ce_runs) {
  if (cal == nullptr) return std::nullopt;
  const std::optional<std::string> best = cal->best_for(m);
  if (!best) return std::nullopt;
  const std::optional<AllGatherGemmMode> mode = parse_all_gather_gemm_mode(*best);
  if (mode == AllGatherGemmMode::kSplitLsa || (mode == AllGatherGemmMode::kFusedCe && fused_ce_runs)) return mode;
  return std::nullopt;
}
}  // namespace

AllGatherGemmMode agm_mode(AllGatherGemmMode plan_mode, int world, int64_t m, const Calibration* cal,
                           bool fused_ce_runs) {
  if (plan_mode != AllGatherGemmMode::kAuto) return plan_mode;
  if (world == 1) return AllGatherGemmMode::kGemmOnly;
  if (!fused_ce_runs) return AllGatherGemmMode::kSplitLsa;  // a table can only say split-lsa then
  return measured_mode(m, cal, fused_ce_runs).value_or(AllGatherGemmMode::kSplitLsa);
}

AllGatherGemmPlan agm_plan(const AllGatherGemmConfig& cfg, int world, int64_t m, int ctas, bool nccl_available,
                           uint64_t window_bytes, FusedTile forced, const Calibration* cal, bool fused_ce_runs) {
  AllGatherGemmPlan p;
  const AgmGemm g = agm_gemm(cfg, world, m, ctas);
  p.gemm_kernel = g.plan.kernel;
  p.gemm_reason = g.plan.reason;
  p.block_m = g.plan.gemv ? 0 : g.plan.block_m;
  p.block_n = g.plan.gemv ? 0 : g.plan.block_n;
  p.gemm_split_k = g.plan.gemv ? 1 : g.plan.split_k;
  p.rows = int64_t(world) * m;
  p.tiles = g.plan.gemv ? 0 : g.plan.tiles;
  p.grid = g.plan.grid;
  p.waves = double(p.tiles) / std::max(1, ctas);
  const int64_t srb = agm_scale_row_bytes(cfg);
  p.bytes_per_peer = m * (cfg.k * agm_elem_bytes(cfg) + srb);
  p.window_bytes = static_cast<int64_t>(window_bytes);
  p.model_gemm_us = 2.0 * double(p.rows) * double(cfg.n) * double(cfg.k) / (modelled_gemm_tflops(cfg.quant) * 1e6);
  // Two gathers where A has scales (rows, then scales), each with its fixed cost.
  constexpr double kGatherLatencyUs = 12;  // one weave all-gather call (as GemmAllGather's model)
  p.model_comm_us = world > 1 ? double(world - 1) * double(p.bytes_per_peer) / (kModelledLinkGbps * 1e3) +
                                    kGatherLatencyUs * (srb > 0 ? 2 : 1)
                              : 0;
  p.model_split_us = p.model_gemm_us + p.model_comm_us;
  // fused-ce's tile and its pulls per peer (where this build has its kernels for the quant).
  const std::vector<gemm::TileCandidate> cands = agm_tile_candidates(cfg);
  const bool fused_ce = any_fused_kernel(cands, [&](int bm, int bn) { return agm_fused_kernel(cfg, bm, bn); });
  const GemmPlan tile = fused_ce ? agm_tile_plan(cfg, world, m, ctas, cands, forced) : GemmPlan{};
  const AgmChunks ch = fused_ce ? agm_chunks(m, tile.block_m, kAgmPullChunks) : AgmChunks{};
  if (fused_ce && world > 1) {
    // The pulls run under the GEMM; the first peer chunk's pull and the enter / arrive kernels are not hidden.
    const double chunk_us = double(ch.chunk_rows) * double(cfg.k * agm_elem_bytes(cfg) + srb) / (kModelledLinkGbps * 1e3);
    constexpr double kFusedCeLatencyUs = 8;  // the enter and arrive kernels (one launch each, a flag round trip)
    const double pulls_us = double(world - 1) * double(p.bytes_per_peer) / (kModelledLinkGbps * 1e3);
    p.model_fused_us = std::max(p.model_gemm_us, pulls_us) + chunk_us + kFusedCeLatencyUs;
  }
  std::ostringstream why;
  fused_ce_runs = fused_ce_runs && fused_ce;
  p.mode = agm_mode(cfg.mode, world, m, cal, fused_ce_runs);
  const std::optional<AllGatherGemmMode> measured = world > 1 ? measured_mode(m, cal, fused_ce_runs) : std::nullopt;
  if (cfg.mode != AllGatherGemmMode::kAuto) {
    why << "mode " << to_string(cfg.mode) << " requested";
    if (cfg.mode == AllGatherGemmMode::kSplitNccl && !nccl_available) why << " (unavailable: no NCCL communicator)";
  } else if (world == 1) {
    why << "world 1: nothing to gather";
  } else if (measured) {
    why << "calibration " << cal->source << (cal->where.empty() ? "" : " (" + cal->where + ")")
        << ": measured fastest near m = " << m;
  } else {
    why << "the gather of " << p.bytes_per_peer << " bytes per peer, then the GEMM (";
    const std::optional<std::string> best = cal ? cal->best_for(m) : std::nullopt;
    if (cal == nullptr)
      why << "auto takes fused-ce only from a calibration table: its model is not calibrated on NVLink";
    else if (!best)
      why << "calibration " << cal->source << " has no row within 2x of m = " << m << "; the model";
    else if (*best == to_string(AllGatherGemmMode::kFusedCe))
      why << "calibration " << cal->source << " measured fused-ce fastest near m = " << m << ", which cannot run here: "
          << (!fused_ce ? "no fused-ce kernel for " + std::string(to_string(cfg.quant)) + " -> " +
                              std::string(to_string(cfg.out_dtype)) + " in this build"
              : !comm::transport_compiled_in(Transport::kCe)
                  ? std::string("this build compiled the ce transport out (-DWEAVE_ENABLE_CE=OFF)")
                  : std::string("the ranks are not in one NVLink domain, or a rank has no stream memory operations"));
    else
      why << "calibration " << cal->source << ": '" << *best << "' near m = " << m << " is not a mode auto takes";
    why << ")";
  }
  if (p.mode == AllGatherGemmMode::kFusedCe && fused_ce) {
    // Its own kernel at the planner's tile, rotated so the own rows go first (fused/ag_gemm/fused_ce.hpp).
    p.block_m = tile.block_m;
    p.block_n = tile.block_n;
    p.gemm_split_k = 1;
    p.tiles = tile.tiles;
    p.grid = tile.grid;
    p.waves = double(p.tiles) / std::max(1, ctas);
    p.gemm_kernel = "the fused-ce GEMM (" + std::to_string(tile.block_m) + "x" + std::to_string(tile.block_n) +
                    ", own rows first, each tile waiting for the chunks it reads)";
    p.gemm_reason = "fused-ce: " + tile.reason;
    if (world == 1)
      why << "; world 1: nothing to pull";
    else
      why << "; pulls of " << ch.chunks << " chunk" << (ch.chunks == 1 ? "" : "s") << " of " << ch.chunk_rows
          << " rows per peer under the GEMM";
  }
  why << "; GEMM " << p.gemm_kernel;
  p.reason = why.str();
  return p;
}

}  // namespace weave::fused

namespace weave {

std::size_t all_gather_gemm_window_bytes(const AllGatherGemmConfig& config, int world) {
  const std::string bad = AllGatherGemm::validate(config, world);
  WEAVE_EXPECT_ARG(bad.empty(), "all_gather_gemm_window_bytes: " << bad);
  const std::optional<fused::Calibration> cal = fused::agm_calibration(config, world);  // its fused-ce rows add words
  WindowLayout layout;
  fused::add_agm_regions(layout, config, world, fused::kAgmBoundSplitBlocks, "agm", cal ? &*cal : nullptr);
  return layout.total_bytes();
}

AllGatherGemmPlan all_gather_gemm_plan(const AllGatherGemmConfig& config, int world, std::int64_t m,
                                       const FusedPlanMachine& machine) {
  const std::string bad = AllGatherGemm::validate(config, world);
  WEAVE_EXPECT_ARG(bad.empty(), "all_gather_gemm_plan: " << bad);
  WEAVE_EXPECT_ARG(m >= 1 && m <= config.m_max,
                   "all_gather_gemm_plan: argument 'm' must be in 1..m_max (" << config.m_max << "), got " << m);
  WEAVE_EXPECT_ARG(machine.num_sms >= 1,
                   "all_gather_gemm_plan: FusedPlanMachine.num_sms must be >= 1, got " << machine.num_sms);
  const std::optional<fused::Calibration> cal = fused::agm_calibration(config, world);
  const fused::AgmCapabilities caps = fused::agm_capabilities(
      config, fused::placement_of(machine, world, fused::agm_fused_built(config)), cal ? &*cal : nullptr);
  AllGatherGemmConfig planned = config;
  planned.mode = caps.plan_mode;
  // A described machine is assumed to have stream memory operations (every Hopper does).
  return fused::agm_plan(planned, world, m, fused::ctas_per_rank(machine.num_sms, config.max_sms), machine.nccl,
                         all_gather_gemm_window_bytes(config, world), {}, cal ? &*cal : nullptr,
                         caps.hosts_fused && caps.fused);
}

}  // namespace weave
