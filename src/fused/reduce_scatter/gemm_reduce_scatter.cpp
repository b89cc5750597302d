// weave::GemmReduceScatter: the public operator over GemmAllReduce's Impl with the leg
// kReduceScatter (fused/reduce_scatter/impl.hpp says what that leg changes). Here: the mode names,
// validation, the public planner and the forwarding.
#include "fused/reduce_scatter/impl.hpp"

#include <sstream>

#include "common/check.hpp"
#include "fused/all_reduce/plan.hpp"

namespace weave {

std::string_view to_string(GemmReduceScatterMode m) noexcept {
  switch (m) {
    case GemmReduceScatterMode::kAuto: return "auto";
    case GemmReduceScatterMode::kGemmOnly: return "gemm-only";
    case GemmReduceScatterMode::kSplitNccl: return "split-nccl";
    case GemmReduceScatterMode::kSplitLsa: return "split-lsa";
    case GemmReduceScatterMode::kSplitCe: return "split-ce";
    case GemmReduceScatterMode::kFused: return "fused";
  }
  return "?";
}

std::optional<GemmReduceScatterMode> parse_gemm_reduce_scatter_mode(std::string_view name) noexcept {
  for (auto m : {GemmReduceScatterMode::kAuto, GemmReduceScatterMode::kGemmOnly, GemmReduceScatterMode::kSplitNccl,
                 GemmReduceScatterMode::kSplitLsa, GemmReduceScatterMode::kSplitCe, GemmReduceScatterMode::kFused})
    if (name == to_string(m)) return m;
  return std::nullopt;
}

namespace fused {

GemmAllReduceMode grs_ar_mode(GemmReduceScatterMode mode) {
  switch (mode) {
    case GemmReduceScatterMode::kAuto: return GemmAllReduceMode::kAuto;
    case GemmReduceScatterMode::kGemmOnly: return GemmAllReduceMode::kGemmOnly;
    case GemmReduceScatterMode::kSplitNccl: return GemmAllReduceMode::kSplitNccl;
    case GemmReduceScatterMode::kSplitLsa: return GemmAllReduceMode::kSplitLsa;
    case GemmReduceScatterMode::kSplitCe: return GemmAllReduceMode::kSplitCe;
    case GemmReduceScatterMode::kFused: return GemmAllReduceMode::kFused;
  }
  return GemmAllReduceMode::kAuto;
}

GemmReduceScatterMode grs_mode(GemmAllReduceMode mode) {
  switch (mode) {
    case GemmAllReduceMode::kGemmOnly: return GemmReduceScatterMode::kGemmOnly;
    case GemmAllReduceMode::kSplitNccl: return GemmReduceScatterMode::kSplitNccl;
    case GemmAllReduceMode::kSplitLsa: return GemmReduceScatterMode::kSplitLsa;
    case GemmAllReduceMode::kSplitCe: return GemmReduceScatterMode::kSplitCe;
    case GemmAllReduceMode::kFused: return GemmReduceScatterMode::kFused;
    default: return GemmReduceScatterMode::kAuto;  // kAuto (nothing ran yet); the others never run here
  }
}

GemmAllReduceConfig grs_ar_config(const GemmReduceScatterConfig& c) {
  GemmAllReduceConfig a;
  a.n = c.n;
  a.k = c.k;
  a.m_max = c.m_max;
  a.quant = c.quant;
  a.scale_layout = c.scale_layout;
  a.mode = grs_ar_mode(c.mode);
  a.exact_own = c.exact_own;
  a.chunks = c.chunks;
  a.mx_route = c.mx_route;
  a.calibration = c.calibration;
  a.max_sms = c.max_sms;
  return a;
}

GemmReduceScatterPlan grs_plan_of(const GemmAllReducePlan& p) {
  GemmReduceScatterPlan q;
  q.mode = grs_mode(p.mode);
  q.block_m = p.block_m;
  q.block_n = p.block_n;
  q.tiles = p.tiles;
  q.waves = p.waves;
  q.grid = p.grid;
  q.band_blocks = p.band_blocks;
  q.chunks = p.chunks;
  q.chunk_blocks = p.chunk_blocks;
  q.rounds = p.rounds;
  q.bytes_rs = p.bytes_rs;
  q.window_bytes = p.window_bytes;
  q.model_gemm_us = p.model_gemm_us;
  q.model_comm_us = p.model_comm_us;
  q.model_split_us = p.model_split_us;
  q.model_fused_us = p.model_fused_us;
  q.reason = p.reason;
  return q;
}

}  // namespace fused

std::string GemmReduceScatter::validate(const GemmReduceScatterConfig& c, int world) {
  std::ostringstream os;
  const std::string ar = GemmAllReduce::validate(fused::grs_ar_config(c), world);
  if (!ar.empty()) os << ar;
  auto rule = [&](bool ok, const std::string& why) {
    if (!ok) os << (os.tellp() > 0 ? "; " : "") << why;
  };
  rule(c.m_max >= world, "m_max must be >= the world (" + std::to_string(world) + "): every call's m is a multiple of it");
  rule(c.mode != GemmReduceScatterMode::kFused || world <= 1 || c.m_max >= int64_t(world) * fused::kGrsFusedRows,
       "mode fused needs m_max >= world x " + std::to_string(fused::kGrsFusedRows) + " = " +
           std::to_string(world * fused::kGrsFusedRows) + " (its calls' m are multiples of it), got " + std::to_string(c.m_max));
  return os.str();
}

std::size_t gemm_reduce_scatter_window_bytes(const GemmReduceScatterConfig& config, int world) {
  const std::string bad = GemmReduceScatter::validate(config, world);
  WEAVE_EXPECT_ARG(bad.empty(), "gemm_reduce_scatter_window_bytes: " << bad);
  WindowLayout layout;
  fused::add_gar_regions(layout, fused::grs_ar_config(config), world, fused::kGarBoundSplitBlocks, "grs",
                         fused::ArLeg::kReduceScatter);
  return layout.total_bytes();
}

GemmReduceScatterPlan gemm_reduce_scatter_plan(const GemmReduceScatterConfig& config, int world, std::int64_t m,
                                               const FusedPlanMachine& machine) {
  const std::string bad = GemmReduceScatter::validate(config, world);
  WEAVE_EXPECT_ARG(bad.empty(), "gemm_reduce_scatter_plan: " << bad);
  WEAVE_EXPECT_ARG(m >= 1 && m <= config.m_max,
                   "gemm_reduce_scatter_plan: argument 'm' must be in 1..m_max (" << config.m_max << "), got " << m);
  WEAVE_EXPECT_ARG(m % world == 0, "gemm_reduce_scatter_plan: argument 'm' must be a multiple of the world ("
                                       << world << "), got " << m);
  WEAVE_EXPECT_ARG(machine.num_sms >= 1, "gemm_reduce_scatter_plan: FusedPlanMachine.num_sms must be >= 1, got "
                                             << machine.num_sms);
  const GemmAllReduceConfig ar = fused::grs_ar_config(config);
  constexpr fused::ArLeg kLeg = fused::ArLeg::kReduceScatter;
  const std::optional<fused::Calibration> cal = fused::gar_calibration(ar, world, kLeg);
  const fused::GarCapabilities caps =
      fused::gar_capabilities(ar, fused::placement_of(machine, world, fused::gar_fused_built(ar)), kLeg);
  return fused::grs_plan_of(fused::gar_plan(fused::gar_plan_config(ar, caps), world, m,
                                            fused::ctas_per_rank(machine.num_sms, config.max_sms), caps.fused,
                                            machine.nccl, gemm_reduce_scatter_window_bytes(config, world),
                                            cal ? &*cal : nullptr, kLeg));
}

std::unique_ptr<GemmReduceScatter> GemmReduceScatter::Impl::create(comm::Group& g, const GemmReduceScatterConfig& config,
                                                                    const fused::GemmAllReduceHooks& hooks) {
  const std::string bad = GemmReduceScatter::validate(config, g.world_size());
  WEAVE_EXPECT_ARG(bad.empty(), "GemmReduceScatterConfig: " << bad);
  auto im = std::make_unique<Impl>();
  im->cfg = config;
  im->ar = GemmAllReduce::Impl::create_impl(g, fused::grs_ar_config(config), hooks, fused::ArLeg::kReduceScatter);
  return wrap(std::move(im));
}

std::unique_ptr<GemmReduceScatter> GemmReduceScatter::Impl::wrap(std::unique_ptr<Impl> im) {
  return std::unique_ptr<GemmReduceScatter>(new GemmReduceScatter(std::move(im)));
}

// --- public forwarding ---
GemmReduceScatter::GemmReduceScatter(Communicator& comm, const GemmReduceScatterConfig& config) {
  std::shared_ptr<comm::Group> g = comm::nccl_group(comm);
  auto made = Impl::create(*g, config);
  impl_ = std::move(made->impl_);
  impl_->owned_group = std::move(g);
}
GemmReduceScatter::GemmReduceScatter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GemmReduceScatter::~GemmReduceScatter() = default;
const GemmReduceScatterConfig& GemmReduceScatter::config() const noexcept { return impl_->cfg; }
GemmReduceScatterPlan GemmReduceScatter::plan(std::int64_t m) const {
  const int w = impl_->ar->group->world_size();
  WEAVE_EXPECT_ARG(m >= 1 && m <= impl_->cfg.m_max && m % w == 0,
                   "GemmReduceScatter::plan: m must be a multiple of the world (" << w << ") in 1..m_max ("
                                                                                  << impl_->cfg.m_max << "), got " << m);
  return fused::grs_plan_of(impl_->ar->plan(m));
}
std::string GemmReduceScatter::describe() const { return impl_->ar->describe(); }
void GemmReduceScatter::run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, cudaStream_t stream) {
  impl_->ar->run(m, a, b, scales, nullptr, stream);
}
void GemmReduceScatter::run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, TensorView out,
                            cudaStream_t stream) {
  impl_->ar->run(m, a, b, scales, &out, stream);
}
TensorView GemmReduceScatter::output(std::int64_t m) const { return impl_->ar->output(m); }
GemmReduceScatterMode GemmReduceScatter::last_mode() const noexcept { return fused::grs_mode(impl_->ar->last); }
void GemmReduceScatter::check() const { impl_->ar->check(); }
SelfTestReport GemmReduceScatter::self_test(std::int64_t m) { return impl_->ar->self_test(m); }

}  // namespace weave
