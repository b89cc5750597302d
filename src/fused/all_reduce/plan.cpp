#include "fused/all_reduce/plan.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "comm/protocol.hpp"
#include "common/check.hpp"
#include "fused/config_rules.hpp"
#include "fused/all_reduce/pull.hpp"
#include "fused/model_rates.hpp"
#include "gemm/planner.hpp"
#include "gemv/gemv.hpp"
#include "gemv/gemv_all_reduce.hpp"
#include "weave/gemm.hpp"

namespace weave {

std::string_view to_string(GemmAllReduceMode m) noexcept {
  switch (m) {
    case GemmAllReduceMode::kAuto: return "auto";
    case GemmAllReduceMode::kGemmOnly: return "gemm-only";
    case GemmAllReduceMode::kSplitNccl: return "split-nccl";
    case GemmAllReduceMode::kSplitLsa: return "split-lsa";
    case GemmAllReduceMode::kSplitCe: return "split-ce";
    case GemmAllReduceMode::kFused: return "fused";
    case GemmAllReduceMode::kDecode: return "decode";
    case GemmAllReduceMode::kFusedRs: return "fused-rs";
    case GemmAllReduceMode::kFusedCe: return "fused-ce";
    case GemmAllReduceMode::kDecodeFused: return "decode-fused";
  }
  return "?";
}

std::optional<GemmAllReduceMode> parse_gemm_all_reduce_mode(std::string_view name) noexcept {
  for (auto m : {GemmAllReduceMode::kAuto, GemmAllReduceMode::kGemmOnly, GemmAllReduceMode::kSplitNccl,
                 GemmAllReduceMode::kSplitLsa, GemmAllReduceMode::kSplitCe, GemmAllReduceMode::kFused,
                 GemmAllReduceMode::kDecode, GemmAllReduceMode::kFusedRs, GemmAllReduceMode::kFusedCe,
                 GemmAllReduceMode::kDecodeFused})
    if (name == to_string(m)) return m;
  return std::nullopt;
}

std::string GemmAllReduce::validate(const GemmAllReduceConfig& c, int world) {
  fused::ConfigRules rules;
  auto rule = [&](bool ok, const std::string& why) { rules.rule(ok, why); };
  rules.world_and_sizes(world, c.m_max, c.max_sms);
  rule(c.chunks >= 0 && c.chunks <= comm::kMaxChunks,
       "chunks must be in 0.." + std::to_string(comm::kMaxChunks) + " (0: the planner's), got " + std::to_string(c.chunks));
  if (c.n >= 1 && c.k >= 1 && c.m_max >= 1) {
    GemmProblem p{.m = c.m_max, .n = c.n, .k = c.k, .mode = c.quant, .scale_layout = c.scale_layout, .out_dtype = DType::kBF16};
    const std::string g = gemm_validate_problem(p);
    rule(g.empty(), "the per-rank GEMM [m_max, N, K_r] = [" + std::to_string(c.m_max) + ", " + std::to_string(c.n) + ", " +
                        std::to_string(c.k) + "]: " + g);
  } else {
    rule(c.n >= 1, "n must be >= 1, got " + std::to_string(c.n));
    rule(c.k >= 1, "k (the per-rank K shard) must be >= 1, got " + std::to_string(c.k));
  }
  // Partials and results travel as bf16 pairs and rows of every band start 16-byte aligned.
  rule(c.n % 8 == 0, "n must be a multiple of 8 (rows of the output and the staging start 16-byte aligned), got " +
                         std::to_string(c.n));
  const double bytes = double(c.m_max) * double(c.n) * 2;
  rule(bytes <= double(int64_t(1) << 40), "the output m_max * N is over 1 TiB");
  // Every LL line's second flag carries the call's M x N x 2 bytes in 32 bits (gemv/gemv_all_reduce.hpp).
  rule(c.mode != GemmAllReduceMode::kDecodeFused || c.n < (int64_t(1) << 26),
       "mode decode-fused needs n < 2^26 (its lines carry M x N x 2 bytes in 32 bits), got n = " + std::to_string(c.n));
  return rules.str();
}

}  // namespace weave

namespace weave::fused {

bool gar_hosts_fused(GemmAllReduceMode mode) {
  return mode == GemmAllReduceMode::kAuto || mode == GemmAllReduceMode::kFused || mode == GemmAllReduceMode::kFusedRs ||
         mode == GemmAllReduceMode::kFusedCe;
}

GemmAllReduceMode gar_split_mode(GemmAllReduceMode mode) {
  switch (mode) {
    case GemmAllReduceMode::kAuto:
    case GemmAllReduceMode::kDecode:
    case GemmAllReduceMode::kSplitLsa: return GemmAllReduceMode::kSplitLsa;
    case GemmAllReduceMode::kSplitCe: return GemmAllReduceMode::kSplitCe;
    default: return GemmAllReduceMode::kAuto;  // none hosted
  }
}

GarCapabilities gar_capabilities(const GemmAllReduceConfig& cfg, const Placement& at, ArLeg leg) {
  GarCapabilities c;
  const int w = at.world;
  c.hosts_fused = gar_hosts_fused(cfg.mode) && w > 1;
  c.hosted_split = w > 1 ? gar_split_mode(cfg.mode) : GemmAllReduceMode::kAuto;
  c.pulls = cfg.mode == GemmAllReduceMode::kFusedCe && w > 1;
  c.mx_bf16_route = cfg.quant == ScaleMode::kMxfp8 && cfg.mx_route != MxRoute::kNative &&
                    !gar_decode_mode(cfg.mode) && cfg.mode != GemmAllReduceMode::kFusedCe;
  c.fused = at.fused_kernel && at.nvlink_domain && w > 1;
  c.split = gar_split_mode(cfg.mode);
  c.plan_mode = cfg.mode;
  if (cfg.mode == GemmAllReduceMode::kAuto && !at.nvlink_domain && w > 1) {
    c.split = GemmAllReduceMode::kSplitNccl;  // every call: the ranks share no NVLink domain
    c.plan_mode = GemmAllReduceMode::kSplitNccl;
  }
  std::ostringstream why;
  const std::string op = gar_op_name(leg);
  const std::string mode = op + ": mode " + std::string(to_string(cfg.mode));
  if (gar_decode_mode(cfg.mode)) {
    const std::string decode_why = gar_decode_unsupported_reason(cfg, 1);
    if (!decode_why.empty()) why << mode << ": the decode GEMV cannot run this op: " << decode_why;
  }
  switch (cfg.mode) {
    case GemmAllReduceMode::kFusedCe:
    case GemmAllReduceMode::kFused:
    case GemmAllReduceMode::kFusedRs:
      if (!at.fused_kernel) {
        why << mode << ": no fused kernel for " << to_string(cfg.quant) << " in this build";
        break;
      }
      [[fallthrough]];
    case GemmAllReduceMode::kDecode:
    case GemmAllReduceMode::kDecodeFused:
    case GemmAllReduceMode::kSplitLsa:
    case GemmAllReduceMode::kSplitCe:
      if (why.tellp() == 0 && !at.nvlink_domain)
        why << mode << " needs every rank in one NVLink domain (" << domain_ranks_phrase(at) << ")";
      break;
    case GemmAllReduceMode::kSplitNccl:
      if (!at.nccl) why << op << ": mode split-nccl needs an NCCL communicator; " << at.group << " has none";
      break;
    case GemmAllReduceMode::kAuto:
      if (!at.nvlink_domain && !at.nccl)
        why << op << ": ranks are not in one NVLink domain and there is no NCCL communicator";
      break;
    case GemmAllReduceMode::kGemmOnly: break;
  }
  c.unavailable = why.str();
  return c;
}

comm::OpShape gar_split_shape(const GemmAllReduceConfig& cfg, int world, int max_blocks, ArLeg leg) {
  comm::OpShape s;
  const bool rs = leg == ArLeg::kReduceScatter;
  s.op = rs ? CollectiveOp::kReduceScatter : CollectiveOp::kAllReduce;
  const Transport transport = gar_split_mode(cfg.mode) == GemmAllReduceMode::kSplitCe ? Transport::kCe : Transport::kLsa;
  s.world = world;
  s.elem_bytes = 2;
  // reduce-scatter: elements per rank's output (in place: its input is the whole partial, gar.out).
  s.max_count = static_cast<size_t>(rs ? cfg.m_max / world : cfg.m_max) * static_cast<size_t>(cfg.n);
  // The algorithm the op's collective will resolve (it asks plan_collective the same), so the
  // window sized before the op exists is the one it runs in (e.g. the ce reduce-scatter's push).
  PlanInputs in;
  in.op = s.op;
  in.bytes = s.max_count * s.elem_bytes;
  in.world = in.lsa_team_size = world;
  in.transport = transport;
  s.algorithm = plan_collective(in).algorithm;
  s.max_blocks = max_blocks;
  s.ll_max_count = comm::ll_max_count_for(transport, s.algorithm, s.max_count, 2);
  s.external_buffers = true;
  return s;
}

GarLayout add_gar_regions(WindowLayout& layout, const GemmAllReduceConfig& cfg, int world, int split_max_blocks,
                          const std::string& prefix, ArLeg leg, const Calibration* cal) {
  GarLayout g;
  const size_t w = static_cast<size_t>(world);
  const GarCapabilities hosts = gar_capabilities(cfg, world_only(world));  // its mode-only part
  g.control = layout.add(prefix + ".control", RegionKind::kControl, comm::kControlBytes).offset;
  g.credits = layout.add(prefix + ".credits", RegionKind::kCredits, 4 * w).offset;
  g.flags = layout.add(prefix + ".flags", RegionKind::kFlags, 4 * size_t(comm::kFlagPhases) * w * comm::kMaxChunks).offset;
  // A band's rows ceil(ceil(m / block_m) / world) x block_m grow with m: the largest at m_max, over
  // every tile a call may run.
  for (const auto& t : gar_tile_candidates(cfg)) {
    const int64_t m_blocks = (cfg.m_max + t.block_m - 1) / t.block_m;
    g.band_cap_rows = std::max<int64_t>(g.band_cap_rows, (m_blocks + world - 1) / world * t.block_m);
  }
  if (hosts.hosts_fused) {
    g.slot_stride = comm::round_up(static_cast<size_t>(g.band_cap_rows) * static_cast<size_t>(cfg.n) * 2, comm::kSlotAlign);
    g.staging = layout.add(prefix + ".staging", RegionKind::kData, w * g.slot_stride).offset;
    g.has_staging = true;
  }
  if (hosts.pulls) {
    g.pull = layout.add(prefix + ".pull", RegionKind::kControl, kArPullBytes).offset;
    g.has_pull = true;
  }
  g.out = layout.add(prefix + ".out", RegionKind::kData, static_cast<uint64_t>(cfg.m_max) * static_cast<uint64_t>(cfg.n) * 2).offset;
  if (gar_hosts_decode_fused(cfg, world, leg, cal)) {
    // The GEMV's LL lines (gemv/gemv_all_reduce.hpp); zeroed with the window, as LL lines must start.
    g.decode_ll = layout.add(prefix + ".decode_ll", RegionKind::kData, detail::gemv_ll_region_bytes(cfg.n, world)).offset;
    g.has_decode_ll = true;
  }
  if (hosts.hosted_split != GemmAllReduceMode::kAuto) {
    g.split = comm::add_op_regions(layout, prefix + ".split", gar_split_shape(cfg, world, split_max_blocks, leg));
    g.has_split = true;
  }
  return g;
}

int64_t gar_decode_max_m(ScaleMode quant) {
  return quant == ScaleMode::kBF16 ? kGarDecodeMaxMBf16 : (quant == ScaleMode::kMxfp8 ? kGarDecodeMaxMMxfp8 : 0);
}
bool gar_decode_pays(ScaleMode quant, int64_t m) { return m <= gar_decode_max_m(quant); }

// One rank's GEMM of m rows, as weave::Gemm would see it.
static GemmProblem gar_local_problem(const GemmAllReduceConfig& cfg, int64_t m) {
  return GemmProblem{.m = m, .n = cfg.n, .k = cfg.k, .mode = cfg.quant, .scale_layout = cfg.scale_layout,
                     .out_dtype = DType::kBF16};
}

std::string gar_decode_unsupported_reason(const GemmAllReduceConfig& cfg, int64_t m) {
  return detail::gemv_unsupported_reason(gar_local_problem(cfg, m));
}

int gar_chunks(const GemmAllReduceConfig& cfg, int64_t m, int ctas, int block_m, int block_n) {
  if (cfg.chunks > 0) return cfg.chunks;
  const int64_t tiles = ((m + block_m - 1) / block_m) * ((cfg.n + block_n - 1) / block_n);
  const double waves = double(tiles) / std::max(1, ctas);
  return static_cast<int>(std::clamp<double>(std::floor(waves / 2), 1, comm::kMaxChunks));
}

GarRates gar_rates(ScaleMode quant) {
  GarRates r;
  r.gemm_tflops = modelled_gemm_tflops(quant);
  return r;
}

GemmAllReducePlan gar_plan(const GemmAllReduceConfig& cfg, int world, int64_t m, int ctas, bool fused_available,
                           bool nccl_available, uint64_t window_bytes, const Calibration* cal, ArLeg leg,
                           bool decode_fused_available) {
  const GemmPlan tile = gar_tile_plan(cfg, world, m, ctas, gar_tile_candidates(cfg), {}, leg);
  return gar_plan(cfg, world, m, ctas, fused_available, nccl_available, window_bytes, cal, tile,
                  ar_schedule(m, cfg.n, tile.block_m, tile.block_n, world, 0,
                              gar_chunks(cfg, m, ctas, tile.block_m, tile.block_n)),
                  leg, decode_fused_available);
}

GemmAllReducePlan gar_plan(const GemmAllReduceConfig& cfg, int world, int64_t m, int ctas, bool fused_available,
                           bool nccl_available, uint64_t window_bytes, const Calibration* cal, const GemmPlan& tile,
                           const ArSchedule& s, ArLeg leg, bool decode_fused_available) {
  GemmAllReducePlan p;
  const bool rs = leg == ArLeg::kReduceScatter;
  p.block_m = tile.block_m;
  p.block_n = tile.block_n;
  p.tiles = int64_t(s.m_blocks) * s.n_blocks;
  p.grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ctas, p.tiles)));
  p.waves = double(p.tiles) / std::max(1, ctas);
  p.band_blocks = s.band;
  p.chunks = s.max_chunks;
  p.chunk_blocks = s.per;
  p.rounds = s.max_chunks + 1;
  const double bytes = double(m) * double(cfg.n) * 2;  // the bf16 output (and each rank's partial)
  // Two-shot volumes, the same for split and fused: each leg sends (world - 1) / world of it.
  p.bytes_rs = world > 1 ? static_cast<int64_t>(bytes * (world - 1) / world) : 0;
  p.bytes_ag = rs ? 0 : p.bytes_rs;  // GemmReduceScatter: no gather leg
  p.window_bytes = static_cast<int64_t>(window_bytes);
  const GarRates r = gar_rates(cfg.quant);
  // The larger of the compute time and the time to stream B_r once (small M is memory-bound).
  const double b_bytes = double(cfg.n) * double(cfg.k) * (cfg.quant == ScaleMode::kBF16 ? 2 : 1);
  p.model_gemm_us = std::max(2.0 * double(m) * double(cfg.n) * double(cfg.k) / (r.gemm_tflops * 1e6),
                             b_bytes / (kModelledHbmGbps * 1e3));
  const double link_us = double(p.bytes_rs + p.bytes_ag) / (r.link_gbps * 1e3);
  p.model_comm_us = world > 1 ? link_us + r.comm_latency_us : 0;
  p.model_split_us = p.model_gemm_us + p.model_comm_us;
  // Fused: both legs under the GEMM; left over is the last round, one own chunk of compute and
  // its gather: gemm / (world * chunks) + (world - 1) / world * S / (chunks * link) (no gather for
  // GemmReduceScatter).
  const double c = std::max(1, s.max_chunks);
  const double tail_us = world > 1 ? p.model_gemm_us / (world * c) + double(p.bytes_ag) / (c * r.link_gbps * 1e3) + 4 : 0;
  p.model_fused_us = std::max(p.model_gemm_us, link_us) + tail_us;
  if (cfg.mode == GemmAllReduceMode::kFusedCe && world > 1) {
    // fused-ce: each peer's copy stream runs both legs' chunks one chain after another (~10 us
    // each, fused/model_rates.hpp). The last round's chains (the own band's last RS copy, then its
    // sum and gather) come after the GEMM: two chains and the last chunk's bytes.
    const double ce_us = double(p.bytes_rs + p.bytes_ag) / (kModelledCeLinkGbps * 1e3);
    const double chains_us = 2.0 * double(s.max_chunks) * kModelledCeChainUs;
    const double last_us = 2 * (kModelledCeChainUs + double(p.bytes_ag) / (c * kModelledCeLinkGbps * 1e3));
    p.model_fused_us = std::max({p.model_gemm_us, ce_us, chains_us}) + last_us + p.model_gemm_us / (world * c);
  }
  std::ostringstream why;
  const GemmAllReduceMode split = gar_split_mode(cfg.mode) == GemmAllReduceMode::kAuto ? GemmAllReduceMode::kSplitLsa
                                                                                       : gar_split_mode(cfg.mode);
  // run() plans every call: ask the GEMV's rules only where decode is in question.
  const std::string decode_why = rs ? std::string("GemmReduceScatter has no decode mode")
                                 : m <= detail::kGemvMaxM || gar_decode_mode(cfg.mode)
                                     ? gar_decode_unsupported_reason(cfg, m)
                                     : std::string("m > ") + std::to_string(detail::kGemvMaxM);
  // GemmReduceScatter's fused bands are whole tiles (fused/all_reduce/plan.hpp grs_fused_fits).
  const std::string fused_why =
      rs && world > 1 && !grs_fused_fits(m, world)
          ? "m = " + std::to_string(m) + " is not a multiple of world x " + std::to_string(kGrsFusedRows) + " = " +
                std::to_string(world * kGrsFusedRows) + " (the fused bands are whole tiles)"
          : std::string();
  // The calibration's measured best, where this op can run it here (auto hosts split-lsa, fused,
  // decode, and decode-fused where the table names it and its GEMV fits one wave); anything else
  // falls through to the model.
  std::optional<GemmAllReduceMode> measured;
  std::string unmeasured;  // why the table's best was not taken
  if (cal != nullptr && cfg.mode == GemmAllReduceMode::kAuto && world > 1) {
    if (const auto best = cal->best_for(m)) {
      const auto mode = parse_gemm_all_reduce_mode(*best);
      if (mode == GemmAllReduceMode::kSplitLsa || (mode == GemmAllReduceMode::kFused && fused_available && fused_why.empty()) ||
          (mode == GemmAllReduceMode::kDecode && decode_why.empty()) ||
          (mode == GemmAllReduceMode::kDecodeFused && decode_fused_available && decode_why.empty()))
        measured = mode;
      else if (mode == GemmAllReduceMode::kDecodeFused)
        unmeasured = "; calibration's decode-fused cannot run here (" +
                     (decode_why.empty() ? std::string("its GEMV at this m does not fit one wave beside the peers'") : decode_why) +
                     ")";
    }
  }
  switch (cfg.mode) {
    case GemmAllReduceMode::kAuto:
      if (world == 1) {
        // Nothing to reduce: the op is one weave::Gemm, so it takes weave::Gemm's decode route (the
        // GEMV at decode sizes, gemm/planner_gemv_route.cpp), not the tiled gemm-only at every m.
        const gemm::GemvRoute route =
            decode_why.empty() ? gemm::gemv_route(gar_local_problem(cfg, m)) : gemm::GemvRoute{false, decode_why};
        p.mode = route.gemv ? GemmAllReduceMode::kDecode : GemmAllReduceMode::kGemmOnly;
        why << "world 1: nothing to reduce" << (route.gemv ? "; weave::Gemm's route, " + route.reason : "");
      } else if (measured) {
        p.mode = *measured;
        why << "calibration " << cal->source << (cal->where.empty() ? "" : " (" + cal->where + ")")
            << ": measured fastest near m = " << m;
      } else if (!rs && gar_decode_pays(cfg.quant, m) && decode_why.empty()) {
        p.mode = GemmAllReduceMode::kDecode;
        why << to_string(cfg.quant) << ", m = " << m << " <= " << gar_decode_max_m(cfg.quant)
            << ": decode GEMV (memory-bound on B_r, " << cfg.n * cfg.k * (cfg.quant == ScaleMode::kBF16 ? 2 : 1)
            << " bytes) + the lsa all-reduce (LL at this size)";
      } else if (!fused_available) {
        p.mode = split;
        why << "fused kernel not available for " << to_string(cfg.quant) << " here; split";
      } else if (!fused_why.empty()) {
        p.mode = split;
        why << fused_why << "; split";
      } else if (p.waves < kGarMinFusedWaves) {
        p.mode = split;
        why << p.waves << " waves of " << p.block_m << "x" << p.block_n << " tiles (< " << kGarMinFusedWaves
            << "): too little GEMM for the rounds to overlap; split";
      } else if (p.model_fused_us * 1.05 > p.model_split_us) {
        p.mode = split;
        why << "modelled fused " << p.model_fused_us << " us is not 5% under split " << p.model_split_us << " us";
      } else {
        p.mode = GemmAllReduceMode::kFused;
        why << p.waves << " waves, " << s.max_chunks << " chunks per band; modelled fused " << p.model_fused_us
            << " us vs split " << p.model_split_us << " us";
      }
      break;
    default:
      p.mode = cfg.mode;
      why << "mode " << to_string(cfg.mode) << " requested";
      if ((cfg.mode == GemmAllReduceMode::kFusedRs || cfg.mode == GemmAllReduceMode::kFusedCe) && world == 1) {
        p.mode = GemmAllReduceMode::kFused;  // a one-rank window has no staging to scatter into
        why << "; world 1: nothing to " << (cfg.mode == GemmAllReduceMode::kFusedRs ? "scatter" : "copy")
            << ", runs as fused";
      }
      if (cfg.mode == GemmAllReduceMode::kSplitNccl && !nccl_available) why << " (unavailable: no NCCL communicator)";
      if (gar_decode_mode(cfg.mode) && !decode_why.empty()) why << " (cannot run m = " << m << ": " << decode_why << ")";
      if (cfg.mode == GemmAllReduceMode::kDecodeFused && world == 1) {
        p.mode = GemmAllReduceMode::kDecode;  // nothing to reduce: the GEMV alone
        why << "; world 1: nothing to reduce, runs as decode";
      }
      if (cfg.mode == GemmAllReduceMode::kFused && world > 1 && !fused_why.empty())
        why << " (cannot run m = " << m << ": " << fused_why << ")";
      break;
  }
  if (!rs && cfg.mode == GemmAllReduceMode::kAuto && world > 1 && p.mode != GemmAllReduceMode::kDecode && !measured &&
      m <= detail::kGemvMaxM)
    why << "; decode not taken: "
        << (decode_why.empty() ? "measured slower than split-lsa for this quant / m (fused/all_reduce/plan.hpp)" : decode_why);
  why << unmeasured;
  p.reason = why.str();
  return p;
}

std::size_t gar_window_bytes(const GemmAllReduceConfig& cfg, int world, const Calibration* cal) {
  WindowLayout layout;
  add_gar_regions(layout, cfg, world, kGarBoundSplitBlocks, "gar", ArLeg::kAllReduce, cal);
  return layout.total_bytes();
}

}  // namespace weave::fused

namespace weave {
std::size_t gemm_all_reduce_window_bytes(const GemmAllReduceConfig& config, int world) {
  const std::string bad = GemmAllReduce::validate(config, world);
  WEAVE_EXPECT_ARG(bad.empty(), "gemm_all_reduce_window_bytes: " << bad);
  // Only auto reads its table (whose decode-fused rows add the lines).
  const std::optional<fused::Calibration> cal =
      config.mode == GemmAllReduceMode::kAuto ? fused::gar_calibration(config, world) : std::nullopt;
  return fused::gar_window_bytes(config, world, cal ? &*cal : nullptr);
}
}  // namespace weave
