// weave::GemmAllGather: construction (validate, plan, agree, window, protocol words) and run()
// for every mode. run() only enqueues: host work is building the call's TMA maps.
//
// Call shapes (rank r, m rows; "own rows" = rows [r*m, (r+1)*m) of gag.out):
//   gemm-only : GEMM -> own rows
//   split-*   : GEMM -> own rows; all-gather of gag.out in place (weave lsa/ce, or ncclAllGather)
//   fused-lsa : one kernel; every tile -> own rows here and at every peer; chunk flags; the kernel
//               ends when every peer's chunks have arrived (fused/all_gather/epilogue.cuh)
//   fused-ce  : the same kernel storing to the own rows only, its chunk flags triggering ->
//               copy stream s - 1 (forked from the kernel's launch-completion event): per chunk,
//               wait trigger, reset, pull peer r + s's chunk rows -> join
//               (docs/memory_ordering.md "ag-fused-ce")
#include "fused/split_collective.hpp"
#include "fused/all_gather/impl.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <sstream>

#include "common/check.hpp"
#include "common/log.hpp"
#include "fused/caller_output.hpp"
#include "fused/ce_build.hpp"
#include "fused/all_gather/plan.hpp"
#include "gemm/operands.hpp"
#include "weave/transport.hpp"

namespace weave {

namespace {

GemmProblem problem_of(const GemmAllGatherConfig& c, int64_t m) {
  return GemmProblem{.m = m, .n = c.n, .k = c.k, .mode = c.quant, .scale_layout = c.scale_layout, .out_dtype = c.out_dtype};
}

}  // namespace

GemmAllGather::Impl::Impl(comm::Group& g, const GemmAllGatherConfig& config, const fused::GemmAllGatherHooks& hk)
    : group(&g), cfg(config), hooks(hk) {
  debug = gemm::MainloopDebug::from_env();
  const int w = g.world_size();
  const std::string bad = GemmAllGather::validate(cfg, w);
  WEAVE_EXPECT_ARG(bad.empty(), "GemmAllGatherConfig: " << bad);
  out_bytes = cfg.out_dtype == DType::kF32 ? 4 : 2;
  WEAVE_CHECK_CUDA(cudaSetDevice(g.device()));
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, g.device()));
  // Every rank's CTAs must be resident together (each waits for its peers' chunks): one CTA per
  // SM, and ranks sharing a GPU (the emulated world) share its SMs.
  grid_cap = fused::ctas_per_rank(comm::rank_sm_share(num_sms, g.ranks_per_device()), cfg.max_sms);
  tiles = fused::gag_tile_candidates(cfg);
  kernels = fused::find_tile_kernels<fused::AllGatherParams>(
      tiles, problem_of(cfg, cfg.m_max), [&](int bm, int bn) { return fused::gag_fused_kernel(cfg, bm, bn); },
      "GemmAllGather");
  const bool fused_built = kernels.front().fused != nullptr;  // all or none (fused_tile_candidates); never empty
  caps = fused::gag_capabilities(cfg, fused::placement_of(g, fused_built));
  if (cfg.mode == GemmAllGatherMode::kFusedCe) fused::require_ce_compiled_in("GemmAllGather");
  WEAVE_EXPECT(caps.unavailable.empty(), Status::kUnavailable, caps.unavailable);
  if (cfg.mode == GemmAllGatherMode::kAuto && caps.split == GemmAllGatherMode::kSplitNccl)
    WEAVE_LOG(kWarn, "rank " << g.rank() << ": GemmAllGather auto: ranks are not all in one NVLink domain ("
                             << g.lsa_team_size() << " of " << w << "); every call runs split-nccl");
  else if (cfg.mode == GemmAllGatherMode::kAuto && !caps.fused)
    WEAVE_LOG(kInfo, "rank " << g.rank() << ": GemmAllGather auto: no fused kernel for " << to_string(cfg.quant)
                             << " -> " << to_string(cfg.out_dtype) << "; every call runs split");
  calibration = fused::gag_calibration(cfg, w);
  // Every rank must build the same op: configuration, mode, the kernels it will use and the
  // calibration's contents (auto's per-call choices must agree).
  std::ostringstream id;
  id << "weave.gemm_all_gather.v1|" << cfg.n << "|" << cfg.k << "|" << cfg.m_max << "|" << static_cast<int>(cfg.quant)
     << "|" << static_cast<int>(cfg.scale_layout) << "|" << static_cast<int>(cfg.out_dtype) << "|"
     << static_cast<int>(cfg.mode) << "|" << static_cast<int>(caps.split) << "|" << caps.fused << "|"
     << hooks.flow_control << "|" << hooks.skip_arrival_wait << "|" << hooks.initial_epoch << "|" << hooks.stale_slot_lag << "|" << grid_cap << "|"
     << (calibration ? calibration->hash : 0) << "|" << static_cast<int>(cfg.mx_route) << "|" << hooks.tile.block_m
     << "x" << hooks.tile.block_n << "|" << fused::fused_tiles_list(tiles);
  rt = std::make_unique<comm::OpRuntime>(g);
  rt->agree_config(id.str(), "GemmAllGather configuration (n, k, m_max, quant, out dtype, mode, testing hooks, "
                             "calibration, tiles built)");
  if (caps.pulls) {
    mem_ops = comm::StreamMemOps::agreed(g, "GemmAllGather fused-ce (device-triggered copies)");
    pulls.open(w - 1);
  }
  if (hooks.tile.forced()) (void)fused::gag_tile_plan(cfg, cfg.m_max, grid_cap, tiles, hooks.tile);  // names a bad one
  WEAVE_EXPECT_ARG(!(cfg.quant == ScaleMode::kMxfp8 && cfg.mx_route == MxRoute::kBf16 &&
                     cfg.mode == GemmAllGatherMode::kFusedCe),
                   "GemmAllGatherConfig.mx_route = bf16 cannot run in mode fused-ce (its copy streams fork from the "
                   "kernel's start, which the either/or's skipped first kernel would give too early); use auto or native");
  if (caps.mx_bf16_route) {
    // The bf16 route's kernels: the same tiles and epilogues as the native ones (bf16 output).
    bool built = true;
    for (auto& k : kernels) {
      k.local_bf16 = gemm::find_gemm_instance(ScaleMode::kBF16, DType::kBF16, gemm::EpilogueKind::kStoreLocal,
                                              k.block_m, k.block_n);
      k.fused_bf16 = gemm::find_gemm_kernel<fused::AllGatherParams>(ScaleMode::kBF16, DType::kBF16,
                                                                    gemm::EpilogueKind::kAllGather, k.block_m, k.block_n);
      built = built && k.bf16_route_built();
    }
    mx = fused::make_mx_route("GemmAllGatherConfig", cfg.mx_route, "rank " + std::to_string(g.rank()) + ": GemmAllGather",
                              built, [] {}, cfg.m_max, cfg.n, cfg.k);
    if (!mx)
      for (auto& k : kernels) k.local_bf16 = nullptr, k.fused_bf16 = nullptr;
  }
  for (const auto& k : kernels) k.prepare();
  if (caps.split == GemmAllGatherMode::kSplitLsa || caps.split == GemmAllGatherMode::kSplitCe) {
    if (w > 1) {
      CollectiveConfig cc;
      cc.op = CollectiveOp::kAllGather;
      cc.transport = caps.split == GemmAllGatherMode::kSplitCe ? Transport::kCe : Transport::kLsa;
      cc.algorithm = caps.split == GemmAllGatherMode::kSplitCe ? Algorithm::kPush : Algorithm::kAuto;
      cc.max_count = static_cast<size_t>(cfg.m_max) * static_cast<size_t>(cfg.n) * out_bytes;
      split = std::make_unique<Collective::Impl>(g, cc, fused::split_collective_hooks(hooks, cfg.max_sms, g));
    }
  }
}

fused::GagLayout GemmAllGather::Impl::lay_out(WindowLayout& layout, const std::string& prefix) {
  const int w = group->world_size();
  gl = fused::add_gag_regions(layout, cfg, w, split ? split->max_blocks : 1, grid_cap, prefix);
  if (split) {
    // The hosted collective's shape must be the one the layout reserved.
    comm::OpShape s = split->shape();
    s.external_buffers = true;
    const comm::OpShape want = fused::gag_split_shape(cfg, w, split->max_blocks);
    WEAVE_EXPECT(s.max_count == want.max_count && s.algorithm == want.algorithm && s.ll_max_count == want.ll_max_count,
                 Status::kInternal, "GemmAllGather: the split all-gather's shape differs from the window layout's");
  }
  out_off = gl.out;
  return gl;
}

void GemmAllGather::Impl::attach(const std::shared_ptr<comm::OpWindow>& window) {
  const comm::ProtoRegions regions{.control = gl.control, .credits = gl.credits, .flags = gl.flags,
                                   .flag_blocks = comm::kMaxChunks};
  rt->attach(window, regions, hooks.flow_control, hooks.initial_epoch, /*needs_peers=*/caps.fused, hooks.stale_slot_lag);
  if (split) split->attach(window, gl.split);
}

std::unique_ptr<GemmAllGather> GemmAllGather::Impl::wrap(std::unique_ptr<Impl> im) {
  return std::unique_ptr<GemmAllGather>(new GemmAllGather(std::move(im)));
}

std::unique_ptr<GemmAllGather> GemmAllGather::Impl::create(comm::Group& g, const GemmAllGatherConfig& config,
                                                            const fused::GemmAllGatherHooks& hooks) {
  auto im = std::make_unique<Impl>(g, config, hooks);
  WindowLayout layout;
  im->lay_out(layout, "gag");
  im->attach(g.make_window(std::move(layout)));
  return wrap(std::move(im));
}

GemmAllGatherPlan GemmAllGather::Impl::plan_on(int64_t m, const GemmPlan& tile, const fused::AgChunks& chunks,
                                               const fused::SplitGemmLeg& leg) const {
  return fused::gag_plan(fused::gag_plan_config(cfg, caps), group->world_size(), m, grid_cap, caps.fused,
                         group->nccl() != nullptr, rt->window().bytes(), calibration ? &*calibration : nullptr, tile,
                         chunks, leg);
}

GemmPlan GemmAllGather::Impl::tile_plan(int64_t m) const {
  return tile_plans.at(m, [&](int64_t mm) { return fused::gag_tile_plan(cfg, mm, grid_cap, tiles, hooks.tile); });
}

const GemmAllGather::Impl::Planned& GemmAllGather::Impl::planned_at(int64_t m) const {
  return planned.at(m, [&](int64_t mm) {
    Planned p;
    p.gemm = tile_plan(mm);
    p.sched = fused::ag_chunks(mm, cfg.n, p.gemm.block_m, p.gemm.block_n);
    // The GEMV only where no rank shares this GPU: its clusters could find no room beside a peer's
    // collective waiting for this rank's rows.
    p.leg = fused::gag_split_leg(cfg, mm, grid_cap, group->ranks_per_device() == 1, hooks.split_leg, hooks.tile);
    p.plan = plan_on(mm, p.gemm, p.sched, p.leg);
    return p;
  });
}

GemmAllGatherPlan GemmAllGather::Impl::plan(int64_t m) const { return planned_at(m).plan; }

GemmAllGather::Impl::Call GemmAllGather::Impl::plan_call(const GemmProblem& prob, const TensorView& a,
                                                          const TensorView& b, const GemmScales& s) const {
  Call c;
  const Planned& p = planned_at(prob.m);
  c.gemm = p.gemm;
  c.kernels = &fused::tile_kernels_at(kernels, c.gemm.block_m, c.gemm.block_n, "GemmAllGather");
  c.chunks = p.sched;
  c.plan = p.plan;
  c.pull = c.plan.mode == GemmAllGatherMode::kFusedCe && group->world_size() > 1;
  // The split modes' GEMV reads dense scale rows only; other scales keep the tile. (c.leg points
  // into the plan cache: valid until its next at(), which nothing calls before the launch.)
  const bool leg_runs = p.leg.kind == fused::SplitLegKind::kSplitK ||
                        (p.leg.kind == fused::SplitLegKind::kGemv && gemm::gemv_scales_dense(prob, s));
  if (!fused::gag_fused_mode(c.plan.mode) && leg_runs) c.leg = &p.leg;
  // mxfp8 on the bf16 route where it pays (never fused-ce): the conversion, then both kernels, either/or.
  if (mx && !c.pull && fused::mx_bf16_route_wanted(cfg.mx_route, prob, num_sms)) {
    c.route = mx.get();
    c.rc = fused::mx_route_call(prob, a, b, s, num_sms, c.gemm.block_m, c.gemm.block_n, c.plan.grid,
                                hooks.mx_route_unguarded);
  }
  return c;
}

void GemmAllGather::Impl::check() const {
  rt->check("GemmAllGather");
  pipeline.check("GemmAllGather");
  if (split) split->check();
}

TensorView GemmAllGather::Impl::output(int64_t m) const {
  WEAVE_EXPECT_ARG(m >= 1 && m <= cfg.m_max, "GemmAllGather::output: m must be in 1.." << cfg.m_max << ", got " << m);
  return TensorView::matrix(out_local(), cfg.out_dtype, group->world_size() * m, cfg.n, group->device());
}

void GemmAllGather::Impl::run(int64_t m, const TensorView& a, const TensorView& b, const GemmScales& s,
                              const TensorView* out, cudaStream_t stream) {
  comm::OpRuntime::CallGuard guard(*rt, "GemmAllGather::run", stream);
  run_in(guard, m, a, b, s, out, stream);
}

void GemmAllGather::Impl::run_in(comm::OpRuntime::CallGuard& guard, int64_t m, const TensorView& a, const TensorView& b,
                                 const GemmScales& s, const TensorView* out, cudaStream_t stream) {
  check();
  WEAVE_EXPECT_ARG(m >= 1 && m <= cfg.m_max, "GemmAllGather::run: m must be in 1.." << cfg.m_max << " (m_max), got " << m);
  const GemmProblem prob = problem_of(cfg, m);
  gemm::check_gemm_inputs(prob, a, b, s, group->device());
  if (out)
    fused::check_caller_output(*out, cfg.out_dtype, group->world_size() * m, cfg.n, group->device(),
                               rt->window().handle());
  guard.enqueueing();
  enqueue(prob, a, b, s, stream);
  WEAVE_EXPECT(!fail_after_enqueue_for_testing, Status::kInternal,
               "GemmAllGather::run: a failure after the call's GPU work was enqueued (testing)");
  if (out) fused::enqueue_caller_copy(*group, *out, output(m), stream);  // inside the guard: ordered as the call
}

void GemmAllGather::Impl::enqueue(const GemmProblem& prob, const TensorView& a, const TensorView& b,
                                  const GemmScales& s, cudaStream_t stream) {
  const int64_t m = prob.m;
  const int w = group->world_size(), r = group->rank();
  const Call call = plan_call(prob, a, b, s);
  const GemmPlan& gp = call.gemm;
  const bool pull = call.pull;
  fused::MxBf16Route* route = call.route;
  const fused::MxRouteCall& rc = call.rc;
  last_mx_bf16_route = route != nullptr;
  auto mainloop = [&] {  // the tile's (host work: TMA maps), not made for the split leg
    gemm::MainloopArgs main = gemm::make_mainloop_args(prob, gp, a, b, s, debug);
    main.timeout_record = pipeline.device();
    return main;
  };
  const size_t rows_bytes = static_cast<size_t>(m) * static_cast<size_t>(cfg.n) * out_bytes;
  char* own = out_local() + static_cast<size_t>(r) * rows_bytes;
  WEAVE_CHECK_CUDA(cudaSetDevice(group->device()));
  last = call.plan.mode;
  if (call.plan.mode == GemmAllGatherMode::kFusedLsa || pull) {
    gemm::KernelArgs<fused::AllGatherParams> args{};
    args.main = mainloop();
    const int box = call.kernels->fused->epi_box_bytes;  // (kStripWidthMaps: every map at the strip width)
    args.epi.tma_c = gemm::make_epilogue_map("the output (own rows)", own, cfg.out_dtype, 1, m, cfg.n, cfg.n, box);
    const WindowHandle& h = rt->window().handle();
    if (!pull)
      for (int st = 1; st < w; ++st) {
        const int peer = comm::peer_at(r, st, w);
        char* dst = h.base[peer] + out_off + static_cast<size_t>(r) * rows_bytes;
        args.epi.tma_peer[st - 1] = gemm::make_epilogue_map("the output (a peer's copy of the own rows)", dst,
                                                            cfg.out_dtype, 1, m, cfg.n, cfg.n, box);
      }
    args.epi.p = rt->proto();
    args.epi.chunks = call.chunks;
    args.epi.m = m;
    args.epi.pull = pull ? 1 : 0;
    args.epi.skip_arrival_wait = hooks.skip_arrival_wait ? 1 : 0;
    args.epi.delay_stores_ns = hooks.delay_stores_ns;
    args.epi.delay_pull_ns = hooks.delay_pull_ns;
    if (!pull) {
      fused::launch_either(*call.kernels->fused, call.kernels->fused_bf16, args, gp.grid, route, rc, stream);
      return;
    }
    // fused-ce: the copy streams fork from the kernel's launch-completion event (every CTA has
    // begun), so their trigger waits, which CUDA cannot see, are never queued ahead of the kernel
    // that stores the triggers: CUDA orders them after it, eagerly and inside a graph. Where ranks
    // share a GPU's queues, the rest is also enqueued only after every rank's launch
    // (Group::enqueue_lockstep). docs/memory_ordering.md "ag-fused-ce".
    // (The kernel starts after the caller's earlier work, so the event orders that too.)
    cudaEvent_t started = pulls.start_event();
    call.kernels->fused->launch_noting_start(args, gp.grid, stream, started);
    group->enqueue_lockstep();
    pulls.fork_after(started);
    enqueue_pulls(m, gp.block_m, args.epi.chunks, rows_bytes, stream);
    return;
  }
  if (call.leg != nullptr) {
    // weave::Gemm's GEMV or K split; its partials in gag.partials (local only; stream-ordered).
    float* partials = reinterpret_cast<float*>(rt->window().local() + gl.partials);
    fused::enqueue_split_gemm_leg(*call.leg, prob, a, b, s, own, partials, grid_cap, pipeline.device(), stream);
  } else {
    gemm::LocalKernelArgs args{};
    args.main = mainloop();
    args.epi.tma_c = gemm::make_epilogue_map("the output (own rows)", own, cfg.out_dtype, 1, m, cfg.n, cfg.n,
                                             call.kernels->local->epi_box_bytes);
    fused::launch_either(*call.kernels->local, call.kernels->local_bf16, args, gp.grid, route, rc, stream);
  }
  if (call.plan.mode == GemmAllGatherMode::kGemmOnly || w == 1) return;
  if (call.plan.mode == GemmAllGatherMode::kSplitNccl) {
    WEAVE_EXPECT(group->nccl() != nullptr, Status::kUnavailable, "GemmAllGather split-nccl: no NCCL communicator");
    WEAVE_CHECK_NCCL(ncclAllGather(own, out_local(), rows_bytes, ncclUint8, group->nccl(), stream));
    return;
  }
  WEAVE_EXPECT(split != nullptr, Status::kInternal, "GemmAllGather: mode " << to_string(call.plan.mode) << " has no all-gather");
  split->run(own, out_local(), rows_bytes, stream);
}

// docs/memory_ordering.md "ag-fused-ce": copy stream s - 1 pulls peer q = r + s's rows chunk by
// chunk, each copy released by its trigger word, which the kernel stores on every path.
void GemmAllGather::Impl::enqueue_pulls(int64_t m, int block_m, const fused::AgChunks& chunks, size_t rows_bytes,
                                        cudaStream_t stream) {
  const int w = group->world_size(), r = group->rank();
  const WindowHandle& h = rt->window().handle();
  uint32_t* ctrl = reinterpret_cast<uint32_t*>(rt->window().local() + rt->proto().control);
  const size_t row_bytes = static_cast<size_t>(cfg.n) * out_bytes;
  for (int st = 1; st < w; ++st) {
    const int q = comm::peer_at(r, st, w);
    cudaStream_t ps = pulls[st - 1];
    const size_t src_rows = out_off + static_cast<size_t>(q) * rows_bytes;
    for (int c = 0; c < chunks.chunks; ++c) {
      const int64_t row0 = int64_t(c) * chunks.per * block_m;
      const int64_t rows = std::min<int64_t>(m, int64_t(c + 1) * chunks.per * block_m) - row0;
      const size_t at = src_rows + static_cast<size_t>(row0) * row_bytes;
      mem_ops->triggered_copy(ps, ctrl + comm::pull_trigger_word(st, c), out_local() + (at - out_off), h.base[q] + at,
                              static_cast<size_t>(rows) * row_bytes);
    }
  }
  pulls.join(stream);
}

std::string GemmAllGather::Impl::describe() const {
  std::ostringstream os;
  os << "GemmAllGather " << to_string(cfg.quant) << " -> " << to_string(cfg.out_dtype) << " N=" << cfg.n << " K=" << cfg.k
     << " m_max=" << cfg.m_max << ", mode " << to_string(cfg.mode);
  if (cfg.mode == GemmAllGatherMode::kAuto)
    os << " (fused " << (caps.fused ? "available" : "unavailable") << ", split " << to_string(caps.split) << ")";
  os << ", " << group->describe() << ", window " << rt->window().bytes() << " bytes, " << grid_cap
     << " CTAs per rank, credits " << (hooks.flow_control ? "on" : "OFF (testing)");
  if (hooks.skip_arrival_wait) os << ", arrival wait SKIPPED (testing)";
  if (cfg.mode == GemmAllGatherMode::kFusedCe) os << ", " << pulls.size() << " copy streams";
  if (mx) os << ", mxfp8 bf16 route " << (cfg.mx_route == MxRoute::kBf16 ? "always" : "where modelled faster") << " ("
             << mx->bytes() << " bytes of bf16 copies)";
  if (hooks.mx_route_unguarded) os << ", route guards OFF (testing)";
  return os.str();
}

// --- public forwarding ---
GemmAllGather::GemmAllGather(Communicator& comm, const GemmAllGatherConfig& config) {
  std::shared_ptr<comm::Group> g = comm::nccl_group(comm);
  auto made = Impl::create(*g, config);
  impl_ = std::move(made->impl_);
  impl_->owned_group = std::move(g);
}
GemmAllGather::GemmAllGather(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GemmAllGather::~GemmAllGather() = default;
const GemmAllGatherConfig& GemmAllGather::config() const noexcept { return impl_->cfg; }
GemmAllGatherPlan GemmAllGather::plan(std::int64_t m) const { return impl_->plan(m); }
std::string GemmAllGather::describe() const { return impl_->describe(); }
void GemmAllGather::run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, cudaStream_t stream) {
  impl_->run(m, a, b, scales, nullptr, stream);
}
void GemmAllGather::run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, TensorView out,
                        cudaStream_t stream) {
  impl_->run(m, a, b, scales, &out, stream);
}
TensorView GemmAllGather::output(std::int64_t m) const { return impl_->output(m); }
GemmAllGatherMode GemmAllGather::last_mode() const noexcept { return impl_->last; }
void GemmAllGather::check() const { impl_->check(); }

}  // namespace weave
