// weave::GemmAllReduce: construction (validate, plan, agree, window, protocol words) and run() for
// every mode. run() only enqueues: host work is building the call's TMA maps and schedule.
//
// Call shapes (rank r, m rows):
//   gemm-only : GEMM -> gar.out (the rank's partial)
//   split-*   : GEMM -> gar.out; all-reduce of gar.out in place (weave lsa/ce, or ncclAllReduce)
//   fused     : one kernel (fused/all_reduce/epilogue.cuh): peers' bands -> their staging; own band summed
//               with the staged partials -> gar.out here and at every peer; the kernel ends when
//               every peer's final chunks have arrived
//   fused-ce  : the same kernel storing every tile to the own rows (peers' bands as partials), its
//               chunk flags triggering -> per peer step s, copy stream s - 1, in the walk's order
//               (fused/all_reduce/pull.hpp): wait trigger, reset, pull (RS: the peer's partial of this
//               band -> staging; AG: the peer's final chunk -> gar.out), RS: landed = 1 -> join
#include "fused/split_collective.hpp"
#include "fused/all_reduce/impl.hpp"
#include "fused/all_reduce/pull.hpp"
#include "fused/all_reduce/tail.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "common/check.hpp"
#include "common/log.hpp"
#include "fused/caller_output.hpp"
#include "fused/ce_build.hpp"
#include "gemm/operands.hpp"
#include "gemv/gemv.hpp"
#include "gemv/gemv_all_reduce.hpp"

namespace weave {

namespace {

// The fused kernel's arguments travel as one __grid_constant__ parameter: keep them under the
// classic 4 KB limit (3.3 KB at kMaxWorld: 16 tensor maps and the schedule's segment table).
static_assert(sizeof(gemm::KernelArgs<fused::AllReduceParams>) <= 4096, "fused all-reduce arguments over 4 KB");

GemmProblem problem_of(const GemmAllReduceConfig& c, int64_t m) {
  return GemmProblem{.m = m, .n = c.n, .k = c.k, .mode = c.quant, .scale_layout = c.scale_layout, .out_dtype = DType::kBF16};
}

// The m in 1..m_top whose bit (m - 1) is set, as ranges: "17-32" or "5, 9-12".
std::string m_ranges(uint64_t bits, int64_t m_top) {
  std::ostringstream out;
  const char* sep = "";
  for (int64_t m = 1; m <= m_top; ++m) {
    if (((bits >> (m - 1)) & 1u) == 0) continue;
    int64_t last = m;
    while (last < m_top && ((bits >> last) & 1u) != 0) ++last;
    out << sep << m;
    if (last > m) out << "-" << last;
    sep = ", ";
    m = last;
  }
  return out.str();
}

}  // namespace

GemmAllReduce::Impl::Impl(comm::Group& g, const GemmAllReduceConfig& config, const fused::GemmAllReduceHooks& hk,
                          fused::ArLeg lg)
    : group(&g), cfg(config), hooks(hk), leg(lg) {
  const bool rs = leg == fused::ArLeg::kReduceScatter;
  debug = gemm::MainloopDebug::from_env();
  const int w = g.world_size();
  const std::string bad = GemmAllReduce::validate(cfg, w);
  WEAVE_EXPECT_ARG(bad.empty(), op_name() << "Config: " << bad);
  WEAVE_EXPECT_ARG(!rs || (!fused::gar_decode_mode(cfg.mode) && cfg.mode != GemmAllReduceMode::kFusedRs &&
                           cfg.mode != GemmAllReduceMode::kFusedCe),
                   "GemmReduceScatter: mode " << to_string(cfg.mode) << " is GemmAllReduce's only");
  WEAVE_CHECK_CUDA(cudaSetDevice(g.device()));
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, g.device()));
  // Every rank's CTAs must be resident together (own tiles wait for peers' partials): one CTA per
  // SM, and ranks sharing a GPU (the emulated world) share its SMs.
  grid_cap = fused::ctas_per_rank(comm::rank_sm_share(num_sms, g.ranks_per_device()), cfg.max_sms);
  tiles = fused::gar_tile_candidates(cfg);
  kernels = fused::find_tile_kernels<fused::AllReduceParams>(
      tiles, problem_of(cfg, cfg.m_max), [&](int bm, int bn) { return fused::gar_fused_kernel(cfg, bm, bn); }, op_name());
  const bool fused_built = kernels.front().fused != nullptr;  // all or none (fused_tile_candidates); never empty
  caps = fused::gar_capabilities(cfg, fused::placement_of(g, fused_built), leg);
  if (cfg.mode == GemmAllReduceMode::kFusedCe) fused::require_ce_compiled_in("GemmAllReduce");
  WEAVE_EXPECT(caps.unavailable.empty(), Status::kUnavailable, caps.unavailable);
  if (cfg.mode == GemmAllReduceMode::kAuto && caps.split == GemmAllReduceMode::kSplitNccl)
    WEAVE_LOG(kWarn, "rank " << g.rank() << ": " << op_name() << " auto: ranks are not all in one NVLink domain ("
                             << g.lsa_team_size() << " of " << w << "); every call runs split-nccl");
  else if (cfg.mode == GemmAllReduceMode::kAuto && !caps.fused && w > 1)
    WEAVE_LOG(kInfo, "rank " << g.rank() << ": " << op_name() << " auto: no fused kernel for " << to_string(cfg.quant)
                             << "; every call runs split");
  calibration = fused::gar_calibration(cfg, w, leg);
  const DecodeFusedShapes one_wave = decode_fused_shapes(g);  // agreed below, raised after
  // Every rank must build the same op: N, K_r, m_max, quant, mode, hooks, the kernels it will use
  // and the calibration's contents (auto's per-call choices must agree).
  std::ostringstream id;
  id << (rs ? "weave.gemm_reduce_scatter.v1|" : "weave.gemm_all_reduce.v1|") << cfg.n << "|" << cfg.k << "|"
     << cfg.m_max << "|" << static_cast<int>(cfg.quant)
     << "|" << static_cast<int>(cfg.scale_layout) << "|" << static_cast<int>(cfg.mode) << "|"
     << static_cast<int>(caps.split) << "|" << caps.fused << "|" << cfg.exact_own << "|" << cfg.chunks << "|"
     << hooks.flow_control << "|" << hooks.skip_arrival_wait << "|" << hooks.skip_partial_wait << "|"
     << hooks.publish_every_tile << "|" << hooks.initial_epoch << "|" << hooks.stale_slot_lag << "|" << grid_cap << "|"
     << (calibration ? calibration->hash : 0) << "|" << static_cast<int>(cfg.mx_route) << "|" << hooks.tile.block_m
     << "x" << hooks.tile.block_n << "|" << fused::fused_tiles_list(tiles) << "|" << one_wave.splits
     << one_wave.unavailable;
  rt = std::make_unique<comm::OpRuntime>(g);
  rt->agree_config(id.str(), std::string(op_name()) + " configuration (n, k = K_r, m_max, quant, mode, exact_own, "
                                                      "chunks, testing hooks, calibration, tiles built, decode-fused "
                                                      "launch shapes)");
  // An explicit decode-fused that cannot run is refused; auto then keeps to decode (logged).
  WEAVE_EXPECT(cfg.mode != GemmAllReduceMode::kDecodeFused || one_wave.unavailable.empty(), Status::kUnavailable,
               one_wave.unavailable);
  if (cfg.mode == GemmAllReduceMode::kAuto && one_wave.hosted) {
    auto_decode_fused_m = one_wave.resident_m;
    if (!one_wave.unavailable.empty())
      WEAVE_LOG(kInfo, "rank " << g.rank() << ": " << op_name() << " auto: the calibration's decode-fused rows at m "
                               << m_ranges(~one_wave.resident_m, std::min<int64_t>(cfg.m_max, detail::kGemvMaxM))
                               << " take the model's choice (" << one_wave.unavailable << ")");
  }
  WEAVE_EXPECT_ARG(!(cfg.quant == ScaleMode::kMxfp8 && cfg.mx_route == MxRoute::kBf16 &&
                     cfg.mode == GemmAllReduceMode::kFusedCe),
                   "GemmAllReduceConfig.mx_route = bf16 cannot run in mode fused-ce (its copy streams fork from the "
                   "kernel's start, which the either/or's skipped first kernel would give too early); use auto or native");
  if (caps.pulls) {
    mem_ops = comm::StreamMemOps::agreed(g, "GemmAllReduce fused-ce (device-triggered copies)");  // (never GemmReduceScatter)
    pulls.open(w - 1);
  }
  if (hooks.tile.forced()) (void)tile_plan(cfg.m_max);  // names a tile that is not a candidate
  if (caps.mx_bf16_route) {
    // The bf16 route's kernels: the same tiles, schedule and epilogues as the native ones.
    bool built = true;
    for (auto& k : kernels) {
      k.local_bf16 = gemm::find_gemm_instance(ScaleMode::kBF16, DType::kBF16, gemm::EpilogueKind::kStoreLocal,
                                              k.block_m, k.block_n);
      k.fused_bf16 = gemm::find_gemm_kernel<fused::AllReduceParams>(ScaleMode::kBF16, DType::kBF16,
                                                                    gemm::EpilogueKind::kAllReduce, k.block_m, k.block_n,
                                                                    ScaleLayout::kRaw, gemm::SchedulerKind::kBandRound);
      built = built && k.bf16_route_built();
    }
    mx = fused::make_mx_route(rs ? "GemmReduceScatterConfig" : "GemmAllReduceConfig", cfg.mx_route,
                              "rank " + std::to_string(g.rank()) + ": " + op_name(), built, [] {}, cfg.m_max, cfg.n,
                              cfg.k);
    if (!mx)
      for (auto& k : kernels) k.local_bf16 = nullptr, k.fused_bf16 = nullptr;
  }
  for (const auto& k : kernels) k.prepare();
  if ((caps.split == GemmAllReduceMode::kSplitLsa || caps.split == GemmAllReduceMode::kSplitCe) && w > 1) {
    // The collective the window layout sized (fused::gar_split_shape: its op and capacity).
    const comm::OpShape shape = fused::gar_split_shape(cfg, w, 1, leg);
    CollectiveConfig cc;
    cc.op = shape.op;
    cc.dtype = DType::kBF16;
    cc.transport = caps.split == GemmAllReduceMode::kSplitCe ? Transport::kCe : Transport::kLsa;
    cc.algorithm = Algorithm::kAuto;
    cc.max_count = shape.max_count;
    split = std::make_unique<Collective::Impl>(g, cc, fused::split_collective_hooks(hooks, cfg.max_sms, g));
  }
}

fused::GarLayout GemmAllReduce::Impl::lay_out(WindowLayout& wl, const std::string& prefix) {
  const int w = group->world_size();
  layout = fused::add_gar_regions(wl, cfg, w, split ? split->max_blocks : 1, prefix, leg,
                                  calibration ? &*calibration : nullptr);
  if (split) {
    comm::OpShape s = split->shape();
    s.external_buffers = true;
    const comm::OpShape want = fused::gar_split_shape(cfg, w, split->max_blocks, leg);
    WEAVE_EXPECT(s.op == want.op && s.max_count == want.max_count && s.algorithm == want.algorithm &&
                     s.ll_max_count == want.ll_max_count && s.elem_bytes == want.elem_bytes,
                 Status::kInternal, op_name() << ": the split collective's shape differs from the window layout's");
  }
  return layout;
}

void GemmAllReduce::Impl::attach(const std::shared_ptr<comm::OpWindow>& window) {
  const comm::ProtoRegions regions{.control = layout.control, .credits = layout.credits, .flags = layout.flags,
                                   .flag_blocks = comm::kMaxChunks};
  rt->attach(window, regions, hooks.flow_control, hooks.initial_epoch, /*needs_peers=*/caps.fused || layout.has_decode_ll,
             hooks.stale_slot_lag);
  if (split) split->attach(window, layout.split);
  if (layout.has_pull) init_pull_words();
}

// fused-ce's words start as the protocol's others do (comm init_op_kernel): triggers and landed
// words 0, the arrived epochs at the initial epoch (zeros would read as a future epoch near 2^32).
// Local only: no peer reads them, and the first call is enqueued after this synchronous copy.
void GemmAllReduce::Impl::init_pull_words() {
  std::vector<uint32_t> words(fused::kArPullWords, 0u);
  for (int i = fused::kArPullArrived; i < fused::kArPullWords; ++i) words[static_cast<size_t>(i)] = hooks.initial_epoch - hooks.stale_slot_lag;
  WEAVE_CHECK_CUDA(cudaSetDevice(group->device()));
  WEAVE_CHECK_CUDA(cudaMemcpy(rt->window().local() + layout.pull, words.data(), fused::kArPullBytes,
                              cudaMemcpyHostToDevice));
}

std::unique_ptr<GemmAllReduce> GemmAllReduce::Impl::wrap(std::unique_ptr<Impl> im) {
  return std::unique_ptr<GemmAllReduce>(new GemmAllReduce(std::move(im)));
}

std::unique_ptr<GemmAllReduce::Impl> GemmAllReduce::Impl::create_impl(comm::Group& g, const GemmAllReduceConfig& config,
                                                                       const fused::GemmAllReduceHooks& hooks,
                                                                       fused::ArLeg leg) {
  auto im = std::make_unique<Impl>(g, config, hooks, leg);
  WindowLayout wl;
  im->lay_out(wl, leg == fused::ArLeg::kAllReduce ? "gar" : "grs");
  im->attach(g.make_window(std::move(wl)));
  return im;
}

std::unique_ptr<GemmAllReduce> GemmAllReduce::Impl::create(comm::Group& g, const GemmAllReduceConfig& config,
                                                            const fused::GemmAllReduceHooks& hooks) {
  return wrap(create_impl(g, config, hooks, fused::ArLeg::kAllReduce));
}

GemmPlan GemmAllReduce::Impl::tile_plan(int64_t m) const {
  return tile_plans.at(
      m, [&](int64_t mm) { return fused::gar_tile_plan(cfg, group->world_size(), mm, grid_cap, tiles, hooks.tile, leg); });
}

fused::ArSchedule GemmAllReduce::Impl::schedule(int64_t m, const GemmPlan& tile) const {
  return fused::ar_schedule(m, cfg.n, tile.block_m, tile.block_n, group->world_size(), group->rank(),
                            fused::gar_chunks(cfg, m, grid_cap, tile.block_m, tile.block_n));
}

GemmAllReducePlan GemmAllReduce::Impl::plan_on(int64_t m, const GemmPlan& tile, const fused::ArSchedule& sched) const {
  return fused::gar_plan(fused::gar_plan_config(cfg, caps), group->world_size(), m, grid_cap, caps.fused,
                         group->nccl() != nullptr, rt->window().bytes(), calibration ? &*calibration : nullptr, tile,
                         sched, leg, m <= detail::kGemvMaxM && ((auto_decode_fused_m >> (m - 1)) & 1u) != 0);
}

const GemmAllReduce::Impl::Planned& GemmAllReduce::Impl::planned_at(int64_t m) const {
  return planned.at(m, [&](int64_t mm) {
    Planned p;
    p.gemm = tile_plan(mm);
    p.sched = schedule(mm, p.gemm);
    p.plan = plan_on(mm, p.gemm, p.sched);
    return p;
  });
}

GemmAllReducePlan GemmAllReduce::Impl::plan(int64_t m) const { return planned_at(m).plan; }

void GemmAllReduce::Impl::check() const {
  rt->check(op_name());
  pipeline.check(op_name());
  if (split) split->check();
}

int64_t GemmAllReduce::Impl::out_row0(int64_t m) const {
  return leg == fused::ArLeg::kAllReduce ? 0 : m / group->world_size() * group->rank();
}
int64_t GemmAllReduce::Impl::out_rows(int64_t m) const {
  return leg == fused::ArLeg::kAllReduce ? m : m / group->world_size();
}

TensorView GemmAllReduce::Impl::output(int64_t m) const {
  WEAVE_EXPECT_ARG(m >= 1 && m <= cfg.m_max, op_name() << "::output: m must be in 1.." << cfg.m_max << ", got " << m);
  WEAVE_EXPECT_ARG(leg == fused::ArLeg::kAllReduce || m % group->world_size() == 0,
                   op_name() << "::output: m must be a multiple of the world (" << group->world_size() << "), got " << m);
  const size_t row_bytes = static_cast<size_t>(cfg.n) * 2;
  return TensorView::matrix(out_local() + static_cast<size_t>(out_row0(m)) * row_bytes, DType::kBF16, out_rows(m),
                            cfg.n, group->device());
}

void GemmAllReduce::Impl::run(int64_t m, const TensorView& a, const TensorView& b, const GemmScales& s,
                              const TensorView* out, cudaStream_t stream) {
  comm::OpRuntime::CallGuard guard(*rt, leg == fused::ArLeg::kAllReduce ? "GemmAllReduce::run" : "GemmReduceScatter::run",
                                   stream);
  run_in(guard, m, a, b, s, out, stream);
}

void GemmAllReduce::Impl::run_in(comm::OpRuntime::CallGuard& guard, int64_t m, const TensorView& a, const TensorView& b,
                                 const GemmScales& s, const TensorView* out, cudaStream_t stream) {
  check();
  const int w = group->world_size();
  WEAVE_EXPECT_ARG(m >= 1 && m <= cfg.m_max, op_name() << "::run: m must be in 1.." << cfg.m_max << " (m_max), got " << m);
  if (leg == fused::ArLeg::kReduceScatter) {
    WEAVE_EXPECT_ARG(m % w == 0, "GemmReduceScatter::run: m must be a multiple of the world (" << w << "): each rank "
                                 "receives m / world rows; got m = " << m);
    WEAVE_EXPECT_ARG(cfg.mode != GemmAllReduceMode::kFused || w == 1 || fused::grs_fused_fits(m, w),
                     "GemmReduceScatter::run: mode fused needs m to be a multiple of world x " << fused::kGrsFusedRows
                         << " = " << w * fused::kGrsFusedRows << " (its bands are whole tiles); got m = " << m
                         << "; use mode auto (split where fused cannot run) or a split mode");
  }
  WEAVE_EXPECT_ARG(!fused::gar_decode_mode(cfg.mode) || m <= detail::kGemvMaxM,
                   "GemmAllReduce::run: mode " << to_string(cfg.mode) << " runs m <= " << detail::kGemvMaxM
                                               << " rows (the decode GEMV), got m = " << m
                                               << "; use mode auto or split-lsa for larger m");
  const GemmProblem prob = problem_of(cfg, m);
  gemm::check_gemm_inputs(prob, a, b, s, group->device());
  if (fused::gar_decode_mode(cfg.mode)) gemm::check_gemv_scales(prob, s);
  if (out) fused::check_caller_output(*out, DType::kBF16, out_rows(m), cfg.n, group->device(), rt->window().handle());
  guard.enqueueing();
  enqueue(prob, a, b, s, stream);
  WEAVE_EXPECT(!fail_after_enqueue_for_testing, Status::kInternal,
               op_name() << "::run: a failure after the call's GPU work was enqueued (testing)");
  if (out) fused::enqueue_caller_copy(*group, *out, output(m), stream);  // inside the guard: ordered as the call
}

GemmAllReduce::Impl::Call GemmAllReduce::Impl::plan_call(const GemmProblem& prob, const TensorView& a,
                                                          const TensorView& b, const GemmScales& s) const {
  const int64_t m = prob.m;
  Call c;
  const Planned& p = planned_at(m);
  c.gemm = p.gemm;
  c.kernels = &fused::tile_kernels_at(kernels, c.gemm.block_m, c.gemm.block_n, op_name());
  c.sched = p.sched;
  c.plan = p.plan;
  c.mode = c.plan.mode;
  if (fused::gar_decode_mode(c.mode)) {  // before the tile GEMM's TMA maps, which it needs not
    if (gemm::gemv_scales_dense(prob, s)) return c;
    c.mode = GemmAllReduceMode::kSplitLsa;  // auto with padded scales: the GEMV cannot read them
  }
  // mxfp8 on the bf16 route where it pays: the conversion, then both kernels, either/or (never
  // fused-ce: mx is not built for it).
  if (mx && fused::mx_bf16_route_wanted(cfg.mx_route, prob, num_sms)) {
    c.route = mx.get();
    c.rc = fused::mx_route_call(prob, a, b, s, num_sms, c.gemm.block_m, c.gemm.block_n, c.plan.grid,
                                hooks.mx_route_unguarded);
  }
  return c;
}

void GemmAllReduce::Impl::enqueue(const GemmProblem& prob, const TensorView& a, const TensorView& b,
                                  const GemmScales& s, cudaStream_t stream) {
  const int64_t m = prob.m;
  const int w = group->world_size(), r = group->rank();
  const Call call = plan_call(prob, a, b, s);
  WEAVE_CHECK_CUDA(cudaSetDevice(group->device()));
  last = call.mode;
  last_mx_bf16_route = call.route != nullptr;
  if (call.mode == GemmAllReduceMode::kDecode) {
    run_decode(prob, a, b, s, stream);
    return;
  }
  if (call.mode == GemmAllReduceMode::kDecodeFused) {
    run_decode_fused(prob, a, b, s, stream);
    return;
  }
  const GemmPlan& gp = call.gemm;
  fused::MxBf16Route* route = call.route;
  const fused::MxRouteCall& rc = call.rc;
  gemm::MainloopArgs main = gemm::make_mainloop_args(prob, gp, a, b, s, debug);
  main.timeout_record = pipeline.device();
  const bool pull = call.mode == GemmAllReduceMode::kFusedCe;  // (world 1: the plan resolved it to fused)
  const size_t count = static_cast<size_t>(m) * static_cast<size_t>(cfg.n);
  if (call.mode == GemmAllReduceMode::kFused || call.mode == GemmAllReduceMode::kFusedRs || pull) {
    const bool scatter = call.mode == GemmAllReduceMode::kFusedRs;  // (world 1: the plan resolved it to fused)
    const int block_m = gp.block_m;
    // GemmReduceScatter's bands are its ranks' rows only where they are whole tiles (gar_tile_plan).
    WEAVE_EXPECT(leg == fused::ArLeg::kAllReduce || w == 1 || m % (int64_t(w) * block_m) == 0, Status::kInvalidArgument,
                 "GemmReduceScatter::run: fused tile " << block_m << "x" << gp.block_n << ": m = " << m
                                                       << " is not a multiple of world x " << block_m);
    // Consumers wait for peers' partials inside the pipeline: its waits must outlast the combine's
    // chain of comm waits. (WEAVE_GEMM_DEBUG_PIPELINE_TIMEOUT_MS, when set, wins: the pipeline-abort test.)
    if (main.pipeline_timeout_ns == 0)
      main.pipeline_timeout_ns = fused::peer_waiting_pipeline_bound_ns(w, group->timeout_s());
    gemm::KernelArgs<fused::AllReduceParams> args{};
    args.main = main;
    fused::AllReduceParams& e = args.epi;
    e.sched = call.sched;
    e.no_gather = leg == fused::ArLeg::kReduceScatter ? 1 : 0;
    const WindowHandle& h = rt->window().handle();
    const int box = call.kernels->fused->epi_box_bytes;  // (kStripWidthMaps: every map at the strip width)
    e.tma_c = gemm::make_epilogue_map("the output", out_local(), DType::kBF16, 1, m, cfg.n, cfg.n, box);
    for (int st = 1; st < w && !pull && !e.no_gather; ++st) {  // fused-ce (and reduce-scatter) store to the own rows only
      const int peer = comm::peer_at(r, st, w);
      e.tma_peer[st - 1] = gemm::make_epilogue_map("the output (a peer's copy)", h.base[peer] + layout.out,
                                                   DType::kBF16, 1, m, cfg.n, cfg.n, box);
    }
    for (int d = 0; d < w && !pull; ++d) {
      if (d == r && !scatter) continue;  // fused-rs: the own band's partials go to this rank's own slot
      const int64_t row0 = int64_t(fused::ar_band_begin(e.sched, d)) * block_m;
      const int64_t rows = std::min<int64_t>(int64_t(fused::ar_band_end(e.sched, d)) * block_m, m) - row0;
      if (rows <= 0) continue;  // an empty band: no tile goes there
      char* slot = h.base[d] + layout.staging + static_cast<size_t>(r) * layout.slot_stride;
      e.tma_stage[d] = gemm::make_epilogue_map("a peer's staging slot", slot, DType::kBF16, 1, rows, cfg.n, cfg.n, box);
    }
    e.p = rt->proto();
    e.staging = layout.staging;
    e.slot_stride = layout.slot_stride;
    e.m = static_cast<int32_t>(m);
    e.n = static_cast<int32_t>(cfg.n);
    e.block_m = block_m;
    e.exact_own = cfg.exact_own ? 1 : 0;
    e.skip_arrival_wait = hooks.skip_arrival_wait ? 1 : 0;
    e.skip_partial_wait = hooks.skip_partial_wait ? 1 : 0;
    e.publish_every_tile = hooks.publish_every_tile ? 1 : 0;
    e.delay_stores_ns = hooks.delay_stores_ns;
    e.scatter_only = scatter ? 1 : 0;
    if (pull) {
      e.pull = 1;
      e.pull_words = layout.pull;
      e.delay_pull_ns = hooks.delay_pull_ns;
      e.pull_stores_after_abort = hooks.pull_stores_after_abort ? 1 : 0;
      // As GemmAllGather fused-ce: the copy streams fork from the kernel's launch-completion event
      // (every CTA has begun), so their trigger waits, which CUDA cannot see, are never queued
      // ahead of the kernel that stores the triggers; where ranks share a GPU's queues the rest is
      // enqueued after every rank's launch (Group::enqueue_lockstep). docs/memory_ordering.md
      // "ar-fused-ce".
      cudaEvent_t started = pulls.start_event();
      call.kernels->fused->launch_noting_start(args, gp.grid, stream, started);
      group->enqueue_lockstep();
      pulls.fork_after(started);
      enqueue_pulls(m, block_m, e.sched, stream);
      return;
    }
    fused::launch_either(*call.kernels->fused, call.kernels->fused_bf16, args, gp.grid, route, rc, stream);
    if (scatter) {
      fused::ArTailParams t{};
      t.p = e.p;
      t.sched = e.sched;
      t.staging = layout.staging;
      t.slot_stride = layout.slot_stride;
      t.out = layout.out;
      t.m = e.m;
      t.n = e.n;
      t.block_m = block_m;
      t.skip_partial_wait = e.skip_partial_wait;
      t.skip_arrival_wait = e.skip_arrival_wait;
      fused::launch_ar_tail(t, fused::ar_tail_grid(e.sched, r, m, block_m, grid_cap), stream);
    }
    return;
  }
  gemm::LocalKernelArgs args{};
  args.main = main;
  args.epi.tma_c = gemm::make_epilogue_map("the output", out_local(), DType::kBF16, 1, m, cfg.n, cfg.n,
                                           call.kernels->local->epi_box_bytes);
  fused::launch_either(*call.kernels->local, call.kernels->local_bf16, args, gp.grid, route, rc, stream);
  if (call.mode == GemmAllReduceMode::kGemmOnly || w == 1) return;
  // reduce-scatter in place: the partial's rows of band r reduce into themselves (in + r * count == out).
  const bool rs = leg == fused::ArLeg::kReduceScatter;
  const size_t per_rank = count / static_cast<size_t>(w);
  char* own_rows = out_local() + static_cast<size_t>(out_row0(m)) * static_cast<size_t>(cfg.n) * 2;
  if (call.mode == GemmAllReduceMode::kSplitNccl) {
    WEAVE_EXPECT(group->nccl() != nullptr, Status::kUnavailable, op_name() << " split-nccl: no NCCL communicator");
    if (rs)
      WEAVE_CHECK_NCCL(ncclReduceScatter(out_local(), own_rows, per_rank, ncclBfloat16, ncclSum, group->nccl(), stream));
    else
      WEAVE_CHECK_NCCL(ncclAllReduce(out_local(), out_local(), count, ncclBfloat16, ncclSum, group->nccl(), stream));
    return;
  }
  WEAVE_EXPECT(split != nullptr, Status::kInternal, op_name() << ": mode " << to_string(call.mode) << " has no collective");
  if (rs) split->run(out_local(), own_rows, per_rank, stream);
  else split->run(out_local(), out_local(), count, stream);
}

// docs/memory_ordering.md "ar-fused-ce": copy stream s - 1 walks peer q = r + s's events
// (fused/all_reduce/pull.hpp), each released by its trigger word, which the kernel stores on every path.
// RS c pulls q's partial of this band's chunk c (q's output rows) into staging slot [q], then sets
// landed (the write's memory barrier orders the copy's bytes first); AG c pulls q's final chunk c
// of band q into the same rows here.
void GemmAllReduce::Impl::enqueue_pulls(int64_t m, int block_m, const fused::ArSchedule& sched, cudaStream_t stream) {
  const int w = group->world_size(), r = group->rank();
  const WindowHandle& h = rt->window().handle();
  uint32_t* words = reinterpret_cast<uint32_t*>(rt->window().local() + layout.pull);
  const size_t row_bytes = static_cast<size_t>(cfg.n) * 2;
  const int64_t band_row0 = int64_t(fused::ar_band_begin(sched, r)) * block_m;
  // Round-major across the streams (fused/all_reduce/pull.hpp): safe where they share one queue;
  // and across ranks sharing a GPU, a lockstep per round (a no-op over NCCL).
  const auto each_round = [&](int) { group->enqueue_lockstep(); };
  fused::ar_pull_enqueue_order(sched, r, w, [&](int st, int leg, int c) {
    const int q = comm::peer_at(r, st, w);
    cudaStream_t ps = pulls[st - 1];
    const bool rs = leg == fused::kArPullRs;
    const fused::ArChunkRows rows = fused::ar_chunk_row_range(sched, rs ? r : q, c, block_m, m);
    const char* src = h.base[q] + layout.out + static_cast<size_t>(rows.first) * row_bytes;
    char* dst = rs ? rt->window().local() + layout.staging + static_cast<size_t>(q) * layout.slot_stride +
                         static_cast<size_t>(rows.first - band_row0) * row_bytes
                   : out_local() + static_cast<size_t>(rows.first) * row_bytes;
    mem_ops->triggered_copy(ps, words + fused::ar_pull_trigger(leg, st, c), dst, src,
                            static_cast<size_t>(rows.rows) * row_bytes);
    if (rs) mem_ops->write(ps, words + fused::ar_pull_landed(st, c), 1u);
  }, each_round);
  // Unlike GemmAllGather's, these copies feed the kernels (the own tiles wait for them), so where
  // ranks share a GPU's queues a rank's join (or its later work) must not enter a queue ahead of
  // a peer's copies: the last round's lockstep puts every rank's copies before any rank's join.
  // (Both seen on the device without them: a first call stalled with rank 0's copy never landed
  // while its peer waited for rank 0's final chunk; docs/perf/fused.md "fused-ce in the emulated
  // world".)
  pulls.join(stream);
}

// decode: the GEMV writes this rank's bf16 partial into gar.out (as the split GEMM does), then the
// split all-reduce sums the ranks' partials in place (its auto algorithm: LL at decode sizes).
void GemmAllReduce::Impl::run_decode(const GemmProblem& prob, const TensorView& a, const TensorView& b,
                                     const GemmScales& s, cudaStream_t stream) {
  detail::GemvArgs gemv = gemm::make_gemv_args(prob, a, b, s, out_local(), cfg.n);
  gemv.pdl = cfg.allow_pdl;  // the all-reduce after it waits for it (its lsa kernels: "pdl")
  gemv.record = pipeline.device();  // a timed-out wait: this op's check() raises it
  if (group->world_size() > 1) {
    gemv.split = decode_split(prob);
    // The registers path, whose kernel decode_split's one-wave planner sized: bf16's stream kernel
    // (one CTA per SM) at that split could take two waves, or not be placeable beside a peer's
    // waiting all-reduce where ranks share a GPU. (Either path gives the same bits at one split.)
    gemv.path = detail::GemvArgs::Path::kRegisters;
  }  // world 1: no all-reduce, no decode-fused to agree with: the GEMV's own plan (weave::Gemm's)
  detail::gemv_launch(gemv, num_sms, stream);
  if (group->world_size() == 1) return;
  WEAVE_EXPECT(split != nullptr, Status::kInternal, "GemmAllReduce: mode decode has no all-reduce");
  split->run(out_local(), out_local(), static_cast<size_t>(prob.m) * static_cast<size_t>(cfg.n), stream);
}

// Mode decode's GEMV runs decode-fused's K split wherever decode-fused could run (its clusters
// fit one wave beside the peers'), so the two modes sum K in one order and are bitwise equal
// (decode-fused takes the plain GEMV's own split where that fits, so on a GPU of its own this is
// mostly the GEMV's plan unchanged). Where ranks share a GPU (the emulated world) it also keeps
// the GEMV within the rank's part of the device: a plain plan of clusters of 16 could not be placed
// while the peers' all-reduce kernels wait on the SMs for this rank's lines. 0 (the GEMV's own
// plan) where decode-fused cannot run. Made once per m (decode_splits).
int GemmAllReduce::Impl::decode_split(const GemmProblem& prob) const {
  if (prob.m < 1 || prob.m > detail::kGemvMaxM) return 0;  // gemv_launch names the rule
  int& cached = decode_splits[static_cast<size_t>(prob.m)];
  if (cached >= 0) return cached;
  int split = 0;  // where the GEMV cannot run this problem (gemv_launch names the rule) or decode-fused could not
  if (detail::gemv_unsupported_reason(prob).empty()) {
    try {
      split = detail::gemv_all_reduce_config(prob, num_sms, group->ranks_per_device()).split;
    } catch (const Error& e) {
      if (e.status() != Status::kUnavailable) throw;
    }
  }
  return cached = split;
}

// decode-fused: the GEMV with the all-reduce epilogue (gemv/gemv_all_reduce.hpp), one kernel.
void GemmAllReduce::Impl::run_decode_fused(const GemmProblem& prob, const TensorView& a, const TensorView& b,
                                           const GemmScales& s, cudaStream_t stream) {
  WEAVE_EXPECT(layout.has_decode_ll, Status::kInternal, op_name() << ": decode-fused planned without its LL lines");
  detail::GemvArgs gemv = gemm::make_gemv_args(prob, a, b, s, out_local(), cfg.n);
  gemv.pdl = cfg.allow_pdl;
  gemv.record = pipeline.device();  // the pushed reduction's landing wait: this op's check() raises it
  detail::GemvAllReduce ar;
  ar.p = rt->proto();
  ar.ll = layout.decode_ll;
  ar.source_bytes = detail::gemv_ll_source_bytes(cfg.n);
  ar.slots = hooks.flow_control ? comm::kLLSlots : 1u;  // one copy: the "ll-reuse" negative control
  ar.payload_bytes = static_cast<uint32_t>(prob.m * cfg.n * 2);
  ar.delay_sends_ns = hooks.delay_stores_ns;
  ar.delay_receive_ns = hooks.delay_receive_ns;
  ar.no_wait = hooks.skip_arrival_wait ? 1 : 0;
  ar.skip_push_rank = hooks.skip_gemv_push_rank;
  detail::gemv_all_reduce_launch(gemv, ar, num_sms, stream);
}

// decode-fused's clusters wait for their peers', so every call's GEMV grid must be resident at once
// (one wave, beside the other ranks sharing the GPU): the K split of every m <= min(m_max, 32) and
// which m can run, or why the first that cannot cannot (nothing for another mode, or world 1). The
// explicit mode is refused whole; auto takes decode-fused at the m that can. All of it enters the
// agreed configuration, so every rank raises the same error and makes the same choices.
GemmAllReduce::Impl::DecodeFusedShapes GemmAllReduce::Impl::decode_fused_shapes(const comm::Group& g) const {
  DecodeFusedShapes shapes;
  shapes.hosted = fused::gar_hosts_decode_fused(cfg, g.world_size(), leg, calibration ? &*calibration : nullptr);
  if (!shapes.hosted) return shapes;
  for (int64_t m = 1; m <= std::min<int64_t>(cfg.m_max, detail::kGemvMaxM); ++m) {
    const GemmProblem p = problem_of(cfg, m);
    if (!detail::gemv_unsupported_reason(p).empty()) continue;  // run() refuses that m as mode decode does
    try {
      shapes.splits += std::to_string(detail::gemv_all_reduce_config(p, num_sms, g.ranks_per_device()).split) + ",";
      shapes.resident_m |= uint64_t{1} << (m - 1);
    } catch (const Error& e) {
      if (e.status() != Status::kUnavailable) throw;
      shapes.splits += "-,";
      if (shapes.unavailable.empty())
        shapes.unavailable = std::string(op_name()) + ": mode decode-fused at m = " + std::to_string(m) + ": " +
                             e.what() + " (" + std::to_string(g.ranks_per_device()) + " rank(s) on this GPU)" +
                             (cfg.mode == GemmAllReduceMode::kDecodeFused ? "; use mode decode" : "");
      if (cfg.mode == GemmAllReduceMode::kDecodeFused) break;  // refused whole; auto goes on per m
    }
  }
  return shapes;
}

std::string GemmAllReduce::Impl::describe() const {
  std::ostringstream os;
  os << op_name() << " " << to_string(cfg.quant) << " N=" << cfg.n << " K_r=" << cfg.k << " m_max=" << cfg.m_max
     << ", mode " << to_string(cfg.mode);
  if (cfg.mode == GemmAllReduceMode::kAuto)
    os << " (fused " << (caps.fused ? "available" : "unavailable") << ", split " << to_string(caps.split) << ")";
  os << ", " << group->describe() << ", window " << rt->window().bytes() << " bytes, " << grid_cap
     << " CTAs per rank";
  if (split) os << ", split all-reduce credits " << (hooks.flow_control ? "on" : "OFF (testing)");
  if (cfg.allow_pdl) os << ", decode GEMV with PDL";
  if (layout.has_decode_ll)
    os << ", decode-fused LL lines " << detail::gemv_ll_region_bytes(cfg.n, group->world_size()) << " bytes"
       << (hooks.flow_control ? "" : " (one copy: testing)");
  if (cfg.exact_own) os << ", exact own term";
  if (mx) os << ", mxfp8 bf16 route " << (cfg.mx_route == MxRoute::kBf16 ? "always" : "where modelled faster") << " ("
             << mx->bytes() << " bytes of bf16 copies)";
  if (hooks.mx_route_unguarded) os << ", route guards OFF (testing)";
  if (hooks.skip_arrival_wait) os << ", arrival wait SKIPPED (testing)";
  if (hooks.skip_partial_wait) os << ", partial wait SKIPPED (testing)";
  if (hooks.publish_every_tile) os << ", chunk election OFF (testing)";
  if (cfg.mode == GemmAllReduceMode::kFusedCe)
    os << ", " << pulls.size() << " copy streams, credits " << (hooks.flow_control ? "on" : "OFF (testing)");
  if (hooks.delay_pull_ns) os << ", gather pulls delayed " << hooks.delay_pull_ns << " ns (testing)";
  return os.str();
}

// --- public forwarding ---
GemmAllReduce::GemmAllReduce(Communicator& comm, const GemmAllReduceConfig& config) {
  std::shared_ptr<comm::Group> g = comm::nccl_group(comm);
  auto made = Impl::create(*g, config);
  impl_ = std::move(made->impl_);
  impl_->owned_group = std::move(g);
}
GemmAllReduce::GemmAllReduce(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GemmAllReduce::~GemmAllReduce() = default;
const GemmAllReduceConfig& GemmAllReduce::config() const noexcept { return impl_->cfg; }
GemmAllReducePlan GemmAllReduce::plan(std::int64_t m) const { return impl_->plan(m); }
std::string GemmAllReduce::describe() const { return impl_->describe(); }
void GemmAllReduce::run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, cudaStream_t stream) {
  impl_->run(m, a, b, scales, nullptr, stream);
}
void GemmAllReduce::run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, TensorView out,
                        cudaStream_t stream) {
  impl_->run(m, a, b, scales, &out, stream);
}
TensorView GemmAllReduce::output(std::int64_t m) const { return impl_->output(m); }
GemmAllReduceMode GemmAllReduce::last_mode() const noexcept { return impl_->last; }
void GemmAllReduce::check() const { impl_->check(); }

}  // namespace weave
