// weave::AllGatherGemm: construction (validate, resolve the mode, agree, window, the hosted
// gathers) and run() for every mode (fused/ag_gemm/impl.hpp has a call's steps and ordering).
#include "fused/ag_gemm/impl.hpp"

#include <cuda_runtime.h>

#include <sstream>

#include "comm/protocol.hpp"
#include "common/check.hpp"
#include "common/log.hpp"
#include "comm/kernels.hpp"
#include "fused/ce_build.hpp"
#include "fused/caller_output.hpp"
#include "fused/split_collective.hpp"
#include "hopper/wait_record.hpp"

namespace weave {

namespace {

// A's scales of `rows` rows at `p` as weave::Gemm takes them (ptpc [rows]; blockscale [rows, K/128];
// mxfp8 raw [rows, K/32]); empty for bf16.
TensorView scale_rows_view(const AllGatherGemmConfig& c, void* p, int64_t rows, int dev) {
  switch (c.quant) {
    case ScaleMode::kPtpc: return TensorView::vector(p, DType::kF32, rows, dev);
    case ScaleMode::kBlockscale: return TensorView::matrix(p, DType::kF32, rows, c.k / 128, dev);
    case ScaleMode::kMxfp8: return TensorView::matrix(p, DType::kUE8M0, rows, c.k / 32, dev);
    default: return TensorView{};
  }
}

// rows x row_bytes from `src` (row pitch src_pitch bytes) into the dense rows at `dst`, unless
// they are those rows already (the caller wrote the slot: input(m)).
void copy_rows(void* dst, const void* src, size_t src_pitch, size_t row_bytes, int64_t rows, cudaStream_t stream) {
  if (dst == src && src_pitch == row_bytes) return;
  WEAVE_CHECK_CUDA(cudaMemcpy2DAsync(dst, row_bytes, src, src_pitch, row_bytes, static_cast<size_t>(rows),
                                     cudaMemcpyDeviceToDevice, stream));
}

}  // namespace

AllGatherGemm::Impl::Impl(comm::Group& g, const AllGatherGemmConfig& config, const fused::AllGatherGemmHooks& hk)
    : group(&g), cfg(config), hooks(hk) {
  const int w = g.world_size();
  const std::string bad = AllGatherGemm::validate(cfg, w);
  WEAVE_EXPECT_ARG(bad.empty(), "AllGatherGemmConfig: " << bad);
  out_bytes = cfg.out_dtype == DType::kF32 ? 4 : 2;
  elem_bytes = static_cast<size_t>(fused::agm_elem_bytes(cfg));
  scale_row_bytes = static_cast<size_t>(fused::agm_scale_row_bytes(cfg));
  WEAVE_CHECK_CUDA(cudaSetDevice(g.device()));
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, g.device()));
  grid_cap = fused::ctas_per_rank(comm::rank_sm_share(num_sms, g.ranks_per_device()), cfg.max_sms);
  tiles = fused::agm_tile_candidates(cfg);
  for (const auto& t : tiles)
    if (const auto* k = fused::agm_fused_kernel(cfg, t.block_m, t.block_n))
      kernels.push_back({.block_m = t.block_m, .block_n = t.block_n, .fused = k});
  calibration = fused::agm_calibration(cfg, w);
  const fused::Calibration* cal = calibration ? &*calibration : nullptr;
  caps = fused::agm_capabilities(cfg, fused::placement_of(g, !kernels.empty()), cal);
  if (cfg.mode == AllGatherGemmMode::kFusedCe) fused::require_ce_compiled_in("AllGatherGemm");
  WEAVE_EXPECT(caps.unavailable.empty(), Status::kUnavailable, caps.unavailable);
  if (cfg.mode == AllGatherGemmMode::kAuto && caps.split == AllGatherGemmMode::kSplitNccl)
    WEAVE_LOG(kWarn, "rank " << g.rank() << ": AllGatherGemm auto: ranks are not all in one NVLink domain ("
                             << g.lsa_team_size() << " of " << w << "); every call runs split-nccl");
  std::ostringstream id;
  id << "weave.all_gather_gemm.v1|" << cfg.n << "|" << cfg.k << "|" << cfg.m_max << "|" << static_cast<int>(cfg.quant)
     << "|" << static_cast<int>(cfg.scale_layout) << "|" << static_cast<int>(cfg.out_dtype) << "|"
     << static_cast<int>(cfg.mode) << "|" << static_cast<int>(caps.split) << "|" << static_cast<int>(cfg.mx_route)
     << "|" << grid_cap << "|" << hooks.flow_control << "|" << hooks.initial_epoch << "|" << hooks.stale_slot_lag
     << "|" << hooks.skip_scale_gather << "|" << hooks.skip_landed_wait << "|" << hooks.pull_chunks << "|"
     << hooks.tile.block_m << "x" << hooks.tile.block_n << "|" << fused::fused_tiles_list(tiles) << "|"
     << (calibration ? calibration->hash : 0);
  rt = std::make_unique<comm::OpRuntime>(g);
  rt->agree_config(id.str(), "AllGatherGemm configuration (n, k, m_max, quant, out dtype, mode, mx_route, max_sms, "
                             "testing hooks, tiles built, calibration)");
  if (caps.hosts_fused) {
    if (hooks.tile.forced()) (void)fused::agm_tile_plan(cfg, w, cfg.m_max, grid_cap, tiles, hooks.tile);  // names a bad one
    // auto across NVLink domains runs split-nccl (logged above); without its kernel it runs split-lsa.
    fused_ce_runs = cfg.mode == AllGatherGemmMode::kFusedCe || caps.fused;
    if (!fused_ce_runs && caps.split != AllGatherGemmMode::kSplitNccl)
      WEAVE_LOG(kWarn, "rank " << g.rank() << ": AllGatherGemm auto: calibration " << cal->source
                               << " names fused-ce, which has no kernel for " << to_string(cfg.quant) << " -> "
                               << to_string(cfg.out_dtype) << " in this build; those calls run split-lsa");
    if (caps.pulls && fused_ce_runs) {
      try {
        mem_ops = comm::StreamMemOps::agreed(g, "AllGatherGemm fused-ce (device-triggered copies)");
      } catch (const Error& e) {
        // Every rank gets the same answer (the agreement is collective): auto keeps its split calls.
        if (cfg.mode == AllGatherGemmMode::kFusedCe || e.status() != Status::kUnavailable) throw;
        WEAVE_LOG(kWarn, "rank " << g.rank() << ": AllGatherGemm auto: calibration " << cal->source
                                 << " names fused-ce, which cannot run here (" << e.what() << "); those calls run split-lsa");
        fused_ce_runs = false;
      }
      if (fused_ce_runs) pulls.open(w - 1);
    }
    if (fused_ce_runs)
      for (const auto& k : kernels) k.prepare();
  }
  // The GEMMs' workspace (their mxfp8 and blockscale routes at the largest call, K-split partials), once.
  workspace_bytes = fused::agm_gemm_workspace_bytes(cfg, w, grid_cap);
  if (workspace_bytes > 0) workspace = std::make_unique<OwnedDeviceMemory>(workspace_bytes);
  if (caps.hosted_split != AllGatherGemmMode::kAuto) {
    const bool ce = caps.hosted_split == AllGatherGemmMode::kSplitCe;
    auto make_gather = [&](size_t row_bytes) {
      CollectiveConfig cc;
      cc.op = CollectiveOp::kAllGather;
      cc.transport = ce ? Transport::kCe : Transport::kLsa;
      cc.algorithm = ce ? Algorithm::kPush : Algorithm::kAuto;
      cc.max_count = static_cast<size_t>(cfg.m_max) * row_bytes;
      return std::make_unique<Collective::Impl>(g, cc, fused::split_collective_hooks(hooks, cfg.max_sms, g));
    };
    gather_a = make_gather(static_cast<size_t>(cfg.k) * elem_bytes);
    if (scale_row_bytes > 0) gather_sa = make_gather(scale_row_bytes);
  }
}

void AllGatherGemm::Impl::lay_out(WindowLayout& layout, const std::string& prefix) {
  const int w = group->world_size();
  gl = fused::add_agm_regions(layout, cfg, w, gather_a ? gather_a->max_blocks : 1, prefix,
                              calibration ? &*calibration : nullptr);
  // The hosted gathers' shapes must be the ones the layout reserved.
  auto expect_shape = [&](const Collective::Impl& c, bool scales) {
    comm::OpShape s = c.shape();
    s.external_buffers = true;
    const comm::OpShape want = fused::agm_split_shape(cfg, w, c.max_blocks, scales);
    WEAVE_EXPECT(s.max_count == want.max_count && s.algorithm == want.algorithm && s.ll_max_count == want.ll_max_count,
                 Status::kInternal, "AllGatherGemm: a hosted all-gather's shape differs from the window layout's");
  };
  if (gather_a) expect_shape(*gather_a, false);
  if (gather_sa) expect_shape(*gather_sa, true);
}

void AllGatherGemm::Impl::attach(const std::shared_ptr<comm::OpWindow>& window) {
  const comm::ProtoRegions regions{.control = gl.control, .credits = gl.credits, .flags = gl.flags, .flag_blocks = 1};
  // fused-ce's flags live in the peers' windows (its pulls read them too).
  rt->attach(window, regions, hooks.flow_control, hooks.initial_epoch, /*needs_peers=*/caps.pulls, hooks.stale_slot_lag);
  if (gather_a) gather_a->attach(window, gl.split_a);
  if (gather_sa) gather_sa->attach(window, gl.split_sa);
}

std::unique_ptr<AllGatherGemm::Impl> AllGatherGemm::Impl::create_impl(comm::Group& g, const AllGatherGemmConfig& config,
                                                                       const fused::AllGatherGemmHooks& hooks) {
  auto im = std::make_unique<Impl>(g, config, hooks);
  WindowLayout layout;
  im->lay_out(layout, "agm");
  im->attach(g.make_window(std::move(layout)));
  return im;
}

std::unique_ptr<AllGatherGemm> AllGatherGemm::Impl::wrap(std::unique_ptr<Impl> im) {
  return std::unique_ptr<AllGatherGemm>(new AllGatherGemm(std::move(im)));
}

std::unique_ptr<AllGatherGemm> AllGatherGemm::Impl::create(comm::Group& g, const AllGatherGemmConfig& config,
                                                            const fused::AllGatherGemmHooks& hooks) {
  return wrap(create_impl(g, config, hooks));
}

AllGatherGemmPlan AllGatherGemm::Impl::plan(int64_t m) const {
  AllGatherGemmConfig planned = cfg;
  planned.mode = caps.plan_mode;
  return fused::agm_plan(planned, group->world_size(), m, grid_cap, group->nccl() != nullptr, rt->window().bytes(),
                         hooks.tile, calibration ? &*calibration : nullptr, fused_ce_runs);
}

void AllGatherGemm::Impl::check_view_m(const char* view, int64_t m) const {
  WEAVE_EXPECT_ARG(m >= 1 && m <= cfg.m_max, "AllGatherGemm::" << view << ": m must be in 1.." << cfg.m_max << ", got " << m);
}

TensorView AllGatherGemm::Impl::gathered_a(int64_t m) const {
  check_view_m("gathered_a", m);
  return TensorView::matrix(local(gl.a), gemm::gemm_input_dtype(cfg.quant), group->world_size() * m, cfg.k,
                            group->device());
}

TensorView AllGatherGemm::Impl::gathered_scale_a(int64_t m) const {
  check_view_m("gathered_scale_a", m);
  if (scale_row_bytes == 0) return TensorView{};
  return scale_rows_view(cfg, local(gl.sa), group->world_size() * m, group->device());
}

TensorView AllGatherGemm::Impl::slot_a(int64_t m) const {
  check_view_m("input", m);
  const size_t at = static_cast<size_t>(group->rank()) * static_cast<size_t>(m) * static_cast<size_t>(cfg.k) * elem_bytes;
  return TensorView::matrix(local(gl.a) + at, gemm::gemm_input_dtype(cfg.quant), m, cfg.k, group->device());
}

TensorView AllGatherGemm::Impl::slot_scales(int64_t m) const {
  check_view_m("input_scales", m);
  if (scale_row_bytes == 0) return TensorView{};
  const size_t at = static_cast<size_t>(group->rank()) * static_cast<size_t>(m) * scale_row_bytes;
  return scale_rows_view(cfg, local(gl.sa) + at, m, group->device());
}

TensorView AllGatherGemm::Impl::output(int64_t m) const {
  check_view_m("output", m);
  return TensorView::matrix(local(gl.out), cfg.out_dtype, group->world_size() * m, cfg.n, group->device());
}

void AllGatherGemm::Impl::check() const {
  rt->check("AllGatherGemm");
  // A GEMM pipeline wait that timed out (weave::Gemm's process-wide record, as Gemm::check).
  const std::string stalled = hopper::take_wait_timeout_report();
  WEAVE_EXPECT(stalled.empty(), Status::kTimeout, "AllGatherGemm: " << stalled << " (that call's output is incomplete)");
  if (gather_a) gather_a->check();
  if (gather_sa) gather_sa->check();
}

void AllGatherGemm::Impl::run(int64_t m, const TensorView& a, const TensorView& b, const GemmScales& s,
                              const TensorView* out, cudaStream_t stream) {
  comm::OpRuntime::CallGuard guard(*rt, "AllGatherGemm::run", stream);
  run_in(guard, m, a, b, s, out, stream);
}

void AllGatherGemm::Impl::run_in(comm::OpRuntime::CallGuard& guard, int64_t m, const TensorView& a, const TensorView& b,
                                 const GemmScales& s, const TensorView* out, cudaStream_t stream) {
  check();
  WEAVE_EXPECT_ARG(m >= 1 && m <= cfg.m_max, "AllGatherGemm::run: m must be in 1.." << cfg.m_max << " (m_max), got " << m);
  // This rank's operands as a GEMM of m rows (A's scales for its rows, B's whole).
  const GemmProblem own{.m = m, .n = cfg.n, .k = cfg.k, .mode = cfg.quant, .scale_layout = cfg.scale_layout,
                        .out_dtype = cfg.out_dtype};
  gemm::check_gemm_inputs(own, a, b, s, group->device());
  // A and its scales are copied into the window: from anywhere but the window, or from exactly
  // this rank's slot (nothing copied); any other window bytes may be a peer's landing rows.
  auto outside_or_slot = [&](const TensorView& v, const TensorView& slot, const char* name) {
    const char* lo = local(0);
    const char* p = static_cast<const char*>(v.data);
    const bool inside = p + v.span_bytes() > lo && p < lo + rt->window().bytes();
    WEAVE_EXPECT_ARG(!inside || (v.data == slot.data && v.ld() == slot.ld()),
                     "argument '" << name << "': lies in the op's window but is not this rank's slot for m = " << m
                                  << " (input(m) / input_scales(m)); got " << v.describe());
  };
  outside_or_slot(a, slot_a(m), "A");
  if (scale_row_bytes) outside_or_slot(s.a, slot_scales(m), "scale_a");
  if (out) {
    fused::check_caller_output(*out, cfg.out_dtype, group->world_size() * m, cfg.n, group->device(),
                               rt->window().handle());
    WEAVE_EXPECT_ARG((out->ld() * static_cast<int64_t>(out_bytes)) % 16 == 0,
                     "argument 'out': the GEMM stores into it by TMA, so its row stride must be a multiple of 16 "
                     "bytes (got " << out->describe() << ")");
  }
  const TensorView c = out ? *out : output(m);
  const AllGatherGemmMode mode = call_mode(m);
  if (mode == AllGatherGemmMode::kFusedCe) {
    guard.enqueueing();
    enqueue_fused_ce(m, a, b, s, c, stream);
    return;
  }
  Gemm& gemm = gemm_for(m, b, s, c);
  guard.enqueueing();
  enqueue(mode, m, a, s, gemm, stream);
}

AllGatherGemmMode AllGatherGemm::Impl::call_mode(int64_t m) {
  const fused::Calibration* cal = calibration ? &*calibration : nullptr;
  const int w = group->world_size();
  if (!fused_ce_runs || cfg.mode != AllGatherGemmMode::kAuto)  // no table lookup to make
    return fused::agm_mode(caps.plan_mode, w, m, cal, fused_ce_runs);
  return call_modes.at(m, [&](int64_t mm) { return fused::agm_mode(caps.plan_mode, w, mm, cal, fused_ce_runs); });
}

namespace {

bool same_view(const TensorView& x, const TensorView& y) {
  return x.data == y.data && x.dtype == y.dtype && x.rank == y.rank && x.shape == y.shape && x.strides == y.strides &&
         x.device == y.device;
}

}  // namespace

bool AllGatherGemm::Impl::CallViews::same_as(const TensorView& b2, const GemmScales& s, const TensorView& c2) const {
  return same_view(b, b2) && same_view(scale_b, s.b) && same_view(c, c2);
}

Gemm& AllGatherGemm::Impl::gemm_for(int64_t m, const TensorView& b, const GemmScales& s, const TensorView& c) {
  const GemmScales gs{.a = gathered_scale_a(m), .b = s.b};
  auto it = gemms.find(m);
  if (it == gemms.end()) {
    if (gemms.size() >= kMaxCachedM) gemms.clear();  // a dropped m is re-planned
    const fused::AgmGemm g = fused::agm_gemm(cfg, group->world_size(), m, grid_cap);
    auto made = std::make_unique<Gemm>(g.problem, gathered_a(m), b, gs, c, g.overrides);
    WEAVE_EXPECT(made->workspace_bytes() <= workspace_bytes, Status::kInternal,
                 "AllGatherGemm: the GEMM of m = " << m << " needs " << made->workspace_bytes()
                                                   << " bytes of workspace, more than the " << workspace_bytes
                                                   << " sized at construction");
    if (made->workspace_bytes() > 0) made->set_workspace(workspace->p, workspace_bytes);
    it = gemms.emplace(m, CachedGemm{std::move(made), {b, s.b, c}}).first;
  } else if (!it->second.views.same_as(b, s, c)) {
    // A's views (the window's gathered rows and scales) are fixed per m.
    it->second.gemm->set_operands(gathered_a(m), b, gs, c);
    it->second.views = {b, s.b, c};
  }
  return *it->second.gemm;
}

void AllGatherGemm::Impl::enqueue(AllGatherGemmMode mode, int64_t m, const TensorView& a, const GemmScales& s,
                                  Gemm& gemm, cudaStream_t stream) {
  const int w = group->world_size(), r = group->rank();
  last = mode;
  WEAVE_CHECK_CUDA(cudaSetDevice(group->device()));
  // 1. This rank's rows and scales into its slot.
  stage_own_rows(m, a, s, /*gated=*/false, stream);
  const size_t row_bytes = static_cast<size_t>(cfg.k) * elem_bytes;
  char* a_base = local(gl.a);
  char* a_slot = a_base + static_cast<size_t>(r) * static_cast<size_t>(m) * row_bytes;
  char* sa_base = scale_row_bytes ? local(gl.sa) : nullptr;
  char* sa_slot = scale_row_bytes ? sa_base + static_cast<size_t>(r) * static_cast<size_t>(m) * scale_row_bytes : nullptr;
  // 2. The gathers, in place.
  const size_t a_bytes = static_cast<size_t>(m) * row_bytes, sa_bytes = static_cast<size_t>(m) * scale_row_bytes;
  if (w > 1 && mode == AllGatherGemmMode::kSplitNccl) {
    WEAVE_EXPECT(group->nccl() != nullptr, Status::kUnavailable, "AllGatherGemm split-nccl: no NCCL communicator");
    WEAVE_CHECK_NCCL(ncclGroupStart());
    WEAVE_CHECK_NCCL(ncclAllGather(a_slot, a_base, a_bytes, ncclUint8, group->nccl(), stream));
    if (sa_bytes && !hooks.skip_scale_gather)
      WEAVE_CHECK_NCCL(ncclAllGather(sa_slot, sa_base, sa_bytes, ncclUint8, group->nccl(), stream));
    WEAVE_CHECK_NCCL(ncclGroupEnd());
  } else if (w > 1 && mode != AllGatherGemmMode::kGemmOnly) {
    WEAVE_EXPECT(gather_a != nullptr, Status::kInternal, "AllGatherGemm: mode " << to_string(mode) << " has no all-gather");
    gather_a->run(a_slot, a_base, a_bytes, stream);
    if (gather_sa && !hooks.skip_scale_gather) gather_sa->run(sa_slot, sa_base, sa_bytes, stream);
  }
  // 3. The GEMM over the gathered rows (its operands set by gemm_for).
  gemm.run(stream);
}

void AllGatherGemm::Impl::stage_own_rows(int64_t m, const TensorView& a, const GemmScales& s, bool gated,
                                         cudaStream_t stream) {
  const size_t mm = static_cast<size_t>(m), r = static_cast<size_t>(group->rank());
  const size_t row_bytes = static_cast<size_t>(cfg.k) * elem_bytes;
  auto copy = [&](char* dst, const void* src, size_t src_pitch, size_t bytes_per_row) {
    if (dst == src && src_pitch == bytes_per_row) return;  // the caller wrote the slot (input(m))
    if (!gated) return copy_rows(dst, src, src_pitch, bytes_per_row, m, stream);
    const int blocks = comm::lsa_blocks_for(mm * bytes_per_row, std::max(1, grid_cap));
    if (src_pitch == bytes_per_row)  // dense rows: one contiguous block
      return comm::launch_gated_local_copy(rt->proto(), dst, static_cast<const char*>(src), mm * bytes_per_row, blocks,
                                           stream);
    comm::launch_gated_rows_copy(rt->proto(), dst, bytes_per_row, static_cast<const char*>(src), src_pitch,
                                 bytes_per_row, m, blocks, stream);
  };
  copy(local(gl.a) + r * mm * row_bytes, a.data, static_cast<size_t>(a.ld()) * elem_bytes, row_bytes);
  if (scale_row_bytes) {
    // ptpc's [m] is one dense row of m fp32 (check_gemm_inputs); the others are [m, K/g] with a row stride.
    const bool vec = s.a.rank == 1;
    const size_t pitch = vec ? scale_row_bytes : static_cast<size_t>(s.a.ld()) * dtype_bytes(s.a.dtype);
    copy(local(gl.sa) + r * mm * scale_row_bytes, s.a.data, pitch, scale_row_bytes);
  }
}

const AllGatherGemm::Impl::CachedFusedArgs& AllGatherGemm::Impl::fused_args_for(int64_t m, const TensorView& b,
                                                                                  const GemmScales& s,
                                                                                  const TensorView& c) {
  auto it = fused_args.find(m);
  if (it != fused_args.end() && it->second.views.same_as(b, s, c)) return it->second;
  if (it == fused_args.end() && fused_args.size() >= kMaxCachedM) fused_args.clear();
  const GemmProblem prob{.m = group->world_size() * m, .n = cfg.n, .k = cfg.k, .mode = cfg.quant,
                         .scale_layout = cfg.scale_layout, .out_dtype = cfg.out_dtype};
  const GemmPlan gp = fused::agm_tile_plan(cfg, group->world_size(), m, grid_cap, tiles, hooks.tile);
  CachedFusedArgs& e = fused_args[m];
  e.args = {};
  e.kernel = fused::tile_kernels_at(kernels, gp.block_m, gp.block_n, "AllGatherGemm").fused;
  e.args.main = gemm::make_mainloop_args(prob, gp, gathered_a(m), b, GemmScales{.a = gathered_scale_a(m), .b = s.b});
  e.args.epi.tma_c = gemm::make_epilogue_map("the output", c.data, cfg.out_dtype, 1, prob.m, cfg.n, c.ld(),
                                             e.kernel->epi_box_bytes);
  e.grid = gp.grid;
  e.block_m = gp.block_m;
  e.views = {b, s.b, c};
  return e;
}

// docs/memory_ordering.md "agm-fused-ce". Rank r, call e, main stream unless named:
//   landed words = 0 -> staging (gated) -> pull enter (e; ready -> peers; wait theirs; triggers) ->
//   [copy stream s - 1: wait trigger, reset it, pull peer q = r + s's scales, then per chunk c its
//   rows and landed[q][c] = 1] beside [the GEMM kernel: own rows first, each tile's producer
//   waiting for landed[q][c] of the chunks it reads] -> join -> arrive ("done reading": every
//   peer pulled this rank's slot, so the next call may restage it).
// Emulated world (ranks sharing the GPU's queues): a lockstep after each phase keeps every rank's
// earlier phase ahead of any rank's later one in a shared queue (the copies need only the enter
// kernels, the GEMMs only their copies, the join and arrive only the GEMMs).
void AllGatherGemm::Impl::enqueue_fused_ce(int64_t m, const TensorView& a, const TensorView& b, const GemmScales& s,
                                           const TensorView& c, cudaStream_t stream) {
  const int w = group->world_size(), r = group->rank();
  last = AllGatherGemmMode::kFusedCe;
  WEAVE_CHECK_CUDA(cudaSetDevice(group->device()));
  const comm::Proto& pr = rt->proto();
  const size_t mm = static_cast<size_t>(m), row_bytes = static_cast<size_t>(cfg.k) * elem_bytes;
  uint32_t* landed = reinterpret_cast<uint32_t*>(local(gl.landed));
  // The call's tile first: the pulls' chunks are whole row blocks of it.
  const CachedFusedArgs& cached = fused_args_for(m, b, s, c);
  const fused::AgmChunks ch = fused::agm_chunks(m, cached.block_m,
                                                hooks.pull_chunks > 0 ? hooks.pull_chunks : fused::kAgmPullChunks);
  WEAVE_CHECK_CUDA(cudaMemsetAsync(landed, 0, 4 * size_t(w) * comm::kMaxChunks, stream));
  stage_own_rows(m, a, s, /*gated=*/true, stream);
  // Every rank's slots sit at [q m, (q + 1) m) rows: ranks of another m are a kMismatch ("zero-copy-offsets").
  comm::launch_ce_pull_enter(pr, stream, comm::ZeroCopyKey{.offset = gl.a, .stride = mm * row_bytes, .check = 1});
  group->enqueue_lockstep();
  if (caps.pulls) {
    // The fork follows the enter kernel, which stores every trigger on every path ("ce-device-trigger").
    pulls.fork(stream);
    const WindowHandle& h = rt->window().handle();
    uint32_t* trigger = reinterpret_cast<uint32_t*>(local(gl.control)) + comm::kCtrlTrigger;
    for (int st = 1; st < w; ++st) {
      const int q = comm::peer_at(r, st, w);
      cudaStream_t ps = pulls[st - 1];
      mem_ops->wait_eq(ps, trigger + st - 1, 1u);
      mem_ops->write(ps, trigger + st - 1, 0u);
      if (hooks.delay_pull_ns > 0) comm::launch_testing_delay(hooks.delay_pull_ns, ps);
      if (scale_row_bytes) {
        const size_t at = gl.sa + size_t(q) * mm * scale_row_bytes;
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(local(at), h.base[q] + at, mm * scale_row_bytes, cudaMemcpyDeviceToDevice, ps));
      }
      for (int k = 0; k < ch.chunks; ++k) {
        const int64_t row0 = int64_t(k) * ch.chunk_rows, rows = std::min<int64_t>(m, row0 + ch.chunk_rows) - row0;
        const size_t at = gl.a + (size_t(q) * mm + size_t(row0)) * row_bytes;
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(local(at), h.base[q] + at, size_t(rows) * row_bytes, cudaMemcpyDeviceToDevice, ps));
        // Without CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER: the copy's bytes are visible before the word.
        mem_ops->write(ps, landed + fused::agm_landed_index(q, k), 1u);
      }
    }
    group->enqueue_lockstep();
  }
  gemm::KernelArgs<fused::AgmRowsParams> args = cached.args;
  args.main.timeout_record = hopper::wait_timeout_record();
  // Above the comm timeout: a stuck copy is reported by the landed wait that knows the peer.
  args.main.pipeline_timeout_ns = pr.timeout_ns + 5'000'000'000ull;
  args.epi.p = pr;
  args.epi.landed = landed;
  args.epi.chunks = ch;
  args.epi.first_block = static_cast<int32_t>((int64_t(r) * m) / cached.block_m);
  args.epi.skip_landed_wait = hooks.skip_landed_wait ? 1 : 0;
  cached.kernel->launch(args, cached.grid, stream);
  if (caps.pulls) {
    group->enqueue_lockstep();
    pulls.join(stream);
  }
  comm::launch_ce_arrive(pr, 1, stream, comm::FlagKind::kDone);
}

std::string AllGatherGemm::Impl::describe() const {
  std::ostringstream os;
  os << "AllGatherGemm " << to_string(cfg.quant) << " -> " << to_string(cfg.out_dtype) << " N=" << cfg.n << " K=" << cfg.k
     << " m_max=" << cfg.m_max << ", mode " << to_string(cfg.mode);
  if (cfg.mode == AllGatherGemmMode::kAuto) os << " (split " << to_string(caps.split) << ")";
  if (calibration)
    os << ", calibration " << calibration->source << (fused_ce_runs ? " (its fused-ce rows run fused-ce)" : "");
  os << ", " << group->describe() << ", window " << rt->window().bytes() << " bytes, " << grid_cap << " CTAs per rank";
  if (!hooks.flow_control) os << ", credits OFF (testing)";
  if (hooks.skip_scale_gather) os << ", scale gather SKIPPED (testing)";
  if (fused_ce_runs) os << ", " << pulls.size() << " copy streams";
  if (hooks.skip_landed_wait) os << ", landed wait SKIPPED (testing)";
  if (workspace_bytes > 0) os << ", GEMM workspace " << workspace_bytes << " bytes";
  return os.str();
}

// --- public forwarding ---
AllGatherGemm::AllGatherGemm(Communicator& comm, const AllGatherGemmConfig& config) {
  std::shared_ptr<comm::Group> g = comm::nccl_group(comm);
  impl_ = Impl::create_impl(*g, config);
  impl_->owned_group = std::move(g);
}
AllGatherGemm::AllGatherGemm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AllGatherGemm::~AllGatherGemm() = default;
const AllGatherGemmConfig& AllGatherGemm::config() const noexcept { return impl_->cfg; }
AllGatherGemmPlan AllGatherGemm::plan(std::int64_t m) const {
  WEAVE_EXPECT_ARG(m >= 1 && m <= impl_->cfg.m_max,
                   "AllGatherGemm::plan: m must be in 1..m_max (" << impl_->cfg.m_max << "), got " << m);
  return impl_->plan(m);
}
std::string AllGatherGemm::describe() const { return impl_->describe(); }
void AllGatherGemm::run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, cudaStream_t stream) {
  impl_->run(m, a, b, scales, nullptr, stream);
}
void AllGatherGemm::run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, TensorView out,
                        cudaStream_t stream) {
  impl_->run(m, a, b, scales, &out, stream);
}
TensorView AllGatherGemm::output(std::int64_t m) const { return impl_->output(m); }
TensorView AllGatherGemm::gathered_a(std::int64_t m) const { return impl_->gathered_a(m); }
TensorView AllGatherGemm::gathered_scale_a(std::int64_t m) const { return impl_->gathered_scale_a(m); }
TensorView AllGatherGemm::input(std::int64_t m) const { return impl_->slot_a(m); }
TensorView AllGatherGemm::input_scales(std::int64_t m) const { return impl_->slot_scales(m); }
AllGatherGemmMode AllGatherGemm::last_mode() const noexcept { return impl_->last; }
void AllGatherGemm::check() const { impl_->check(); }

}  // namespace weave
