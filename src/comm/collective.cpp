// weave::Collective: construction (plan, agreement, window, op init) and run() for each
// transport. run() only enqueues: no allocation, no host sync, graph-capturable.
//
// ce call shapes (rank r; "enter"/"arrive" are one-CTA kernels, "put" the gated SM store into
// peers, ce_kernels.cu; docs/memory_ordering.md "ce-gate"):
//   all-gather : enter -> put [in -> peer.land[r]] -> memcpy in -> out[r] -> arrive(0) -> copy out
//   reduce-scat: enter -> put [in[s] -> peer s.staging[r]] -> arrive(0) -> reduce
//   one-shot AR: enter -> put [in -> peer.staging[r]] -> arrive(0) -> reduce
//   two-shot AR: enter -> put [chunk s -> owner s] -> arrive(0) -> reduce my chunk
//                -> put [my sum -> peer.land] -> arrive(1) -> copy out
// ce_ungated_peer_copies (negative control): each put is fork -> [peer s: memcpy] -> join.
// The ce transport uses one staging copy (slot 0) and a full credit (lag 0): a captured graph's
// memcpy destinations are fixed, so they cannot rotate with the call epoch the way lsa slots do.
#include <algorithm>
#include <cstring>
#include <sstream>

#include "comm/collective_impl.hpp"
#include "comm/protocol.hpp"
#include "common/check.hpp"
#include "common/log.hpp"

namespace weave {

namespace {

bool overlaps(const void* a, size_t na, const void* b, size_t nb) {
  const auto* x = static_cast<const char*>(a);
  const auto* y = static_cast<const char*>(b);
  return x < y + nb && y < x + na;
}

ncclDataType_t nccl_type(DType d) { return d == DType::kBF16 ? ncclBfloat16 : ncclFloat32; }

// Testing hook CollectiveConfig::receive_delay_ns: only the last rank is slow, so its peers run ahead.
uint64_t receive_delay_of(const CollectiveConfig& cfg, int rank, int world) {
  return rank == world - 1 ? cfg.receive_delay_ns : 0;
}

}  // namespace

Collective::Impl::Impl(comm::Group& c, const CollectiveConfig& config) : group(&c), cfg(config) {
  WEAVE_EXPECT_ARG(cfg.max_count >= 1, "CollectiveConfig.max_count must be >= 1 (the largest call's count)");
  WEAVE_EXPECT_ARG(cfg.op == CollectiveOp::kAllGather || cfg.dtype == DType::kBF16 || cfg.dtype == DType::kF32,
                   "CollectiveConfig.dtype for " << to_string(cfg.op) << " must be bf16 or fp32 (fp32 accumulation), got "
                                                 << to_string(cfg.dtype));
  WEAVE_EXPECT_ARG(cfg.ce_sm_share >= 0 && cfg.ce_sm_share <= 0.9,
                   "CollectiveConfig.ce_sm_share must be in [0, 0.9], got " << cfg.ce_sm_share);
  WEAVE_EXPECT_ARG(cfg.max_blocks >= 0 && cfg.max_blocks <= 4096,
                   "CollectiveConfig.max_blocks must be in 0..4096 (0 = from occupancy), got " << cfg.max_blocks);
  esz = cfg.op == CollectiveOp::kAllGather ? 1 : dtype_bytes(cfg.dtype);
  PlanInputs pin;
  pin.op = cfg.op;
  pin.bytes = cfg.max_count * esz;
  pin.world = c.world_size();
  pin.lsa_team_size = c.lsa_team_size();
  // The emulated world has no NCCL communicator: its nccl transport is as good as compiled out.
  pin.compiled_nccl = WEAVE_ENABLE_NCCL_TRANSPORT && c.nccl() != nullptr;
  pin.compiled_ce = WEAVE_ENABLE_CE;
  pin.compiled_lsa = WEAVE_ENABLE_LSA;
  pin.peer_access = true;  // NCCL's LSA team (lsa_team_size) is built from peer access
  pin.stream_mem_ops = comm::StreamMemOps::unsupported_reason(c.device()).empty();
  pin.transport = cfg.transport;
  pin.algorithm = cfg.algorithm;
  plan = plan_collective(pin);
  if (plan.fell_back) WEAVE_LOG(kWarn, "rank " << c.rank() << ": " << to_string(cfg.op) << ": " << plan.reason);
  WEAVE_CHECK_CUDA(cudaSetDevice(c.device()));

  // Every rank must run the same op with the same grid cap (flags are per CTA).
  // Ranks sharing one GPU (the emulated world) share its SMs: each gets its part, so all ranks'
  // CTAs are resident together.
  int blocks = cfg.max_blocks > 0 ? cfg.max_blocks
                                  : std::max(1, comm::lsa_max_blocks(c.device(), c.world_size()) / c.ranks_per_device());
  for (auto b : c.all_gather(static_cast<uint64_t>(blocks), "the lsa grid size"))
    blocks = std::min<int>(blocks, static_cast<int>(b));
  max_blocks = blocks;
  std::ostringstream id;
  id << "weave.collective.v1|" << static_cast<int>(cfg.op) << "|" << static_cast<int>(plan.transport) << "|"
     << static_cast<int>(plan.algorithm) << "|" << static_cast<int>(cfg.dtype) << "|" << cfg.max_count << "|"
     << cfg.flow_control << "|" << cfg.initial_epoch << "|" << cfg.stale_slot_lag << "|" << max_blocks << "|" << cfg.ce_sm_share << "|"
     << cfg.receive_delay_ns << "|" << cfg.ce_ungated_peer_copies;
  const std::string ids = id.str();
  rt = std::make_unique<comm::OpRuntime>(c);
  rt->agree_config(ids, std::string(to_string(cfg.op)) +
                            " configuration (transport, algorithm, dtype, max_count, testing hooks)");
  try {
    if (plan.algorithm == Algorithm::kNcclCopyEngine) {
      WEAVE_EXPECT(c.communicator() != nullptr, Status::kUnavailable,
                   "algorithm 'nccl-ce' needs an NCCL communicator; " << c.describe() << " has none");
      ncclConfig_t nc = NCCL_CONFIG_INITIALIZER;
      nc.CTAPolicy = NCCL_CTA_POLICY_ZERO;
      ncclComm_t split = nullptr;
      WEAVE_CHECK_NCCL(ncclCommSplit(c.nccl(), 0, c.rank(), &split, &nc));
      CommOptions o;
      o.timeout_s = c.timeout_s();
      nccl_ce_comm = Communicator::adopt(split, o);
      nccl_ce_group = comm::nccl_group(*nccl_ce_comm);
    }
  } catch (...) {
    release();
    throw;
  }
}

comm::OpShape Collective::Impl::shape() const {
  comm::OpShape shape;
  shape.op = cfg.op;
  shape.algorithm = plan.algorithm;
  shape.world = group->world_size();
  shape.elem_bytes = esz;
  shape.max_count = cfg.max_count;
  shape.max_blocks = max_blocks;
  shape.ll_max_count = comm::ll_max_count_for(plan.transport, plan.algorithm, cfg.max_count, esz);
  return shape;
}

void Collective::Impl::attach(std::shared_ptr<comm::OpWindow> window, const comm::OpOffsets& offsets) {
  comm::Group& c = *group;
  try {
    off = offsets;
    win = window.get();
    WEAVE_CHECK_CUDA(cudaSetDevice(c.device()));
    const comm::ProtoRegions regions{.control = off.control, .credits = off.credits, .flags = off.flags,
                                     .flag_blocks = max_blocks};
    rt->attach(std::move(window), regions, cfg.flow_control, cfg.initial_epoch,
               /*needs_peers=*/plan.transport != Transport::kNccl, cfg.stale_slot_lag);
    proto = rt->proto();
    if (plan.transport == Transport::kCe) {
      if (plan.algorithm == Algorithm::kPull) {
        mem_ops = comm::StreamMemOps::agreed(c, "ce pull (device-triggered copies)");
      }
      copies.open(c.world_size() - 1);
    }
  } catch (...) {
    release();
    throw;
  }
}

void Collective::Impl::release() noexcept {
  cudaSetDevice(group->device());
  copies.release();
  win = nullptr;
  if (rt) rt->release();  // drops the window before the communicator it is registered with
  nccl_ce_group.reset();
  nccl_ce_comm.reset();
}

Collective::Impl::~Impl() { release(); }

ncclComm_t Collective::Impl::nccl_comm() const { return nccl_ce_comm ? nccl_ce_comm->nccl() : group->nccl(); }

void Collective::Impl::check() const {
  if (rt) rt->check(std::string(to_string(cfg.op)) + " over " + std::string(to_string(plan.transport)));
}

void Collective::Impl::run(const void* in, void* out, size_t count, cudaStream_t stream) {
  const comm::OpRuntime::CallGuard guard(*rt, to_string(cfg.op), stream);
  check();
  const int w = group->world_size(), r = group->rank();
  WEAVE_EXPECT_ARG(count >= 1 && count <= cfg.max_count,
                   to_string(cfg.op) << ": count must be in 1.." << cfg.max_count << " (max_count), got " << count);
  WEAVE_EXPECT_ARG(in != nullptr && out != nullptr, to_string(cfg.op) << ": in and out must not be null");
  const auto* ci = static_cast<const char*>(in);
  auto* co = static_cast<char*>(out);
  const size_t bytes = count * esz;
  switch (cfg.op) {
    case CollectiveOp::kAllGather:
      WEAVE_EXPECT_ARG(ci == co + r * bytes || !overlaps(ci, bytes, co, w * bytes),
                       "all-gather: in overlaps out; only in == out + rank * bytes (in-place) may");
      break;
    case CollectiveOp::kReduceScatter:
      WEAVE_EXPECT_ARG(co == ci + r * bytes || !overlaps(ci, w * bytes, co, bytes),
                       "reduce-scatter: out overlaps in; only out == in + rank * count (in-place) may");
      break;
    case CollectiveOp::kAllReduce:
      WEAVE_EXPECT_ARG(ci == co || !overlaps(ci, bytes, co, bytes), "all-reduce: in overlaps out; only in == out may");
      break;
  }
  if (off.output_bytes == 0 && plan.transport != Transport::kNccl) {
    // Hosted without in/out regions (OpShape::external_buffers): nothing to stage through.
    const size_t in_n = (cfg.op == CollectiveOp::kReduceScatter ? w : 1) * bytes;
    const size_t out_n = (cfg.op == CollectiveOp::kAllGather ? w : 1) * bytes;
    WEAVE_EXPECT_ARG(win->contains(in, in_n) && win->contains(out, out_n),
                     to_string(cfg.op) << ": this op has no staging regions of its own; in and out must lie in its window");
  }
  WEAVE_CHECK_CUDA(cudaSetDevice(group->device()));
  switch (plan.transport) {
    case Transport::kNccl:
#if WEAVE_ENABLE_NCCL_TRANSPORT
      run_nccl(in, out, count, stream);
      return;
#else
      break;
#endif
    case Transport::kLsa:
#if WEAVE_ENABLE_LSA
      run_lsa(in, out, count, stream);
      return;
#else
      break;
#endif
    case Transport::kCe:
#if WEAVE_ENABLE_CE
      run_ce(in, out, count, stream);
      return;
#else
      break;
#endif
  }
  (void)stream;  // reached only when the selected transport is compiled out
  WEAVE_EXPECT(false, Status::kUnavailable, "transport '" << to_string(plan.transport) << "' is compiled out");
}

bool Collective::Impl::nccl_symmetric_defect(const void* in, const void* out, size_t count) const {
  if (plan.transport != Transport::kNccl || cfg.op == CollectiveOp::kAllReduce || (count * esz) % 4 == 0) return false;
  const int w = group->world_size();
  const size_t in_bytes = (cfg.op == CollectiveOp::kReduceScatter ? w : 1) * count * esz;
  const size_t out_bytes = (cfg.op == CollectiveOp::kAllGather ? w : 1) * count * esz;
  return win->contains(in, in_bytes) && win->contains(out, out_bytes);
}

void Collective::Impl::run_nccl(const void* in, void* out, size_t count, cudaStream_t stream) {
  // docs/comm.md "NCCL symmetric kernels": with both buffers in a symmetric window NCCL 2.28.9
  // returned wrong data for all-gather and reduce-scatter blocks whose size is not a multiple of
  // 4 bytes (Collectives.NcclSymmetricKernelsOnOddSizesCharacterised). Refuse rather than return it.
  WEAVE_EXPECT(!nccl_symmetric_defect(in, out, count), Status::kUnsupported,
               to_string(cfg.op) << " over nccl: " << count * esz
                                 << " bytes per rank with both buffers in the symmetric window would run NCCL's "
                                    "symmetric kernels, which returned wrong data for block sizes that are not a "
                                    "multiple of 4 bytes in weave's self-test (NCCL 2.28.9); pass buffers outside "
                                    "the window, or use the ce or lsa transport");
  const ncclComm_t c = nccl_comm();
  switch (cfg.op) {
    case CollectiveOp::kAllGather: WEAVE_CHECK_NCCL(ncclAllGather(in, out, count, ncclUint8, c, stream)); break;
    case CollectiveOp::kReduceScatter:
      WEAVE_CHECK_NCCL(ncclReduceScatter(in, out, count, nccl_type(cfg.dtype), ncclSum, c, stream));
      break;
    case CollectiveOp::kAllReduce:
      WEAVE_CHECK_NCCL(ncclAllReduce(in, out, count, nccl_type(cfg.dtype), ncclSum, c, stream));
      break;
  }
}

void Collective::Impl::run_lsa(const void* in, void* out, size_t count, cudaStream_t stream) {
  const int w = group->world_size(), r = group->rank();
  const auto* ci = static_cast<const char*>(in);
  auto* co = static_cast<char*>(out);
  if (comm::call_uses_ll(off, plan.algorithm, count)) {
    comm::LlCall l;
    l.p = proto;
    l.in = ci;
    l.out = co;
    l.count = count;
    l.in_place = cfg.op == CollectiveOp::kAllGather && ci == co + r * count;
    l.ll = off.ll;
    l.ll_stride = off.ll_stride;
    // Negative control: one copy per source lets a rank a call ahead overwrite lines its peer
    // has not read yet (docs/memory_ordering.md "ll-reuse").
    l.slots = cfg.flow_control ? comm::kLLSlots : 1;
    l.receive_delay_ns = receive_delay_of(cfg, r, w);
    l.blocks = comm::ll_blocks_for(count * esz, max_blocks);
    comm::launch_lsa_ll(l, cfg.op, cfg.dtype, stream);
    return;
  }
  comm::LsaCall c;
  c.p = proto;
  c.in = ci;
  c.out = co;
  c.count = count;
  c.slots = off.slots;
  c.staging = off.staging;
  c.slot_bytes = off.slot_bytes;
  switch (cfg.op) {
    case CollectiveOp::kAllGather: {
      const bool out_win = win->contains(out, w * count);
      c.in_place = ci == co + r * count;
      c.blocks = comm::lsa_blocks_for(count, max_blocks);
      if (plan.algorithm == Algorithm::kPull) {
        if (c.in_place && out_win) {
          c.src_off = offset_of(out);
          c.src_stride = count;
        } else if (!c.in_place && win->contains(in, count)) {
          c.src_off = offset_of(in);
        } else {
          c.stage_in = 1;
          c.src_off = off.input;
        }
        c.zc = zero_copy_key(c.src_off, c.src_stride);
        comm::launch_lsa_all_gather_pull(c, stream);
      } else {
        c.land = out_win ? offset_of(out) : off.output;
        c.copy_out = out_win ? 0 : 1;
        c.credit_lag = 0;  // lands in the receiver's output itself: one copy, full credit
        c.zc = zero_copy_key(c.land, count);
        comm::launch_lsa_all_gather_push(c, stream);
      }
      return;
    }
    case CollectiveOp::kReduceScatter:
      c.stride = off.oneshot_stride;
      c.credit_lag = off.slots - 1;
      c.blocks = comm::lsa_blocks_for(count * esz, max_blocks);
      comm::launch_lsa_reduce_scatter(c, cfg.dtype, stream);
      return;
    case CollectiveOp::kAllReduce:
      if (comm::call_uses_one_shot(off, plan.algorithm, count)) {
        c.stride = off.oneshot_stride;
        c.credit_lag = off.slots - 1;
        c.blocks = comm::lsa_blocks_for(count * esz, max_blocks);
        comm::launch_lsa_all_reduce_one_shot(c, cfg.dtype, stream);
      } else {
        const bool out_win = win->contains(out, count * esz);
        c.stride = off.twoshot_stride;
        c.land = out_win ? offset_of(out) : off.output;
        c.copy_out = out_win ? 0 : 1;
        c.credit_lag = 0;  // the gather leg lands in the receiver's output
        c.zc = zero_copy_key(c.land, count * esz);
        c.blocks = comm::lsa_blocks_for(comm::max_owner_chunk(count, w, comm::kVecBytes / esz) * esz, max_blocks);
        comm::launch_lsa_all_reduce_two_shot(c, cfg.dtype, stream);
      }
      return;
  }
}

// docs/memory_ordering.md "ce-gate": every write of a ce push into a peer goes through here. By
// default a gated SM put on the caller's stream, after the kernel whose waits grant it: it stores
// nothing once a wait of this call (or an earlier one) failed, so a call that timed out never
// overwrites a slow peer's live output or staging. A copy-engine copy cannot be gated that way
// (a stream wait can only delay it, and every such wait must be released, aborted calls included,
// so the copy would still run). The negative control (ce_ungated_peer_copies) enqueues the
// copy-engine copies on the peer streams as before issue 16; `sm` (all-gather only: the same
// source and offset for every peer) is its ce_sm_share part, stored by SM kernels beside them.
void Collective::Impl::ce_push(comm::CePut put, size_t sm, cudaStream_t stream) {
  const int w = group->world_size(), r = group->rank();
  put.p = proto;
  size_t most = 0;
  for (int s = 1; s < w; ++s) most = std::max(most, put.bytes[comm::peer_at(r, s, w)]);
  if (most == 0) return;
  if (!cfg.ce_ungated_peer_copies) {
    put.blocks = comm::lsa_blocks_for(most, max_blocks);
    comm::launch_ce_put(put, stream);
    return;
  }
  const WindowHandle& h = win->handle();
  copies.fork(stream);
  for (int s = 1; s < w; ++s) {
    const int q = comm::peer_at(r, s, w);
    if (put.bytes[q] > sm)
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(h.base[q] + put.dst_off[q] + sm, put.src[q] + sm, put.bytes[q] - sm,
                                       cudaMemcpyDeviceToDevice, copies[s - 1]));
  }
  const int q1 = comm::peer_at(r, 1, w);
  if (sm) comm::launch_sm_put(proto, put.dst_off[q1], put.src[q1], sm, comm::lsa_blocks_for(sm, max_blocks), stream);
  copies.join(stream);
}

void Collective::Impl::run_ce(const void* in, void* out, size_t count, cudaStream_t stream) {
  const int w = group->world_size(), r = group->rank();
  const auto* ci = static_cast<const char*>(in);
  auto* co = static_cast<char*>(out);
  char* local = win->local();
  const size_t bytes = count * esz;
  auto local_copy = [&](char* dst, const char* src, size_t n) {
    if (n) WEAVE_CHECK_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
  };
  comm::ReduceCall rc;
  rc.p = proto;
  rc.staging = off.staging;
  rc.slot_bytes = off.slot_bytes;
  rc.slots = 1;  // fixed slot: see the file comment
  rc.receive_delay_ns = receive_delay_of(cfg, r, w);  // the credit's negative control
  if (cfg.op == CollectiveOp::kAllGather && plan.algorithm == Algorithm::kPull) {
    run_ce_pull_all_gather(ci, co, bytes, stream);
    return;
  }
  switch (cfg.op) {
    case CollectiveOp::kAllGather: {
      const bool out_win = win->contains(out, w * bytes);
      const uint64_t land = out_win ? offset_of(out) : off.output;
      comm::launch_ce_enter(proto, /*credit_lag=*/0, /*use_credits=*/true, stream, zero_copy_key(land, bytes));
      comm::CePut put;
      for (int s = 1; s < w; ++s) {
        const int q = comm::peer_at(r, s, w);
        put.src[q] = ci;
        put.dst_off[q] = land + r * bytes;
        put.bytes[q] = bytes;
      }
      // ce_sm_share (negative control only): the first `sm` bytes of the block by SM stores
      // (docs/memory_ordering.md "ce-completion": the put kernel fences).
      const size_t sm = w > 1 && bytes >= (size_t(1) << 20) ? static_cast<size_t>(bytes * cfg.ce_sm_share) / 16 * 16 : 0;
      ce_push(put, sm, stream);
      if (ci != co + r * bytes) local_copy(co + r * bytes, ci, bytes);
      comm::launch_ce_arrive(proto, 0, stream);
      if (!out_win) {
        local_copy(co, local + land, r * bytes);
        local_copy(co + (r + 1) * bytes, local + land + (r + 1) * bytes, (w - r - 1) * bytes);
      }
      return;
    }
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllReduce: {
      const bool rs = cfg.op == CollectiveOp::kReduceScatter;
      if (rs || comm::call_uses_one_shot(off, plan.algorithm, count)) {
        // Into the peers' fixed staging: no zero-copy key to agree on.
        comm::launch_ce_enter(proto, /*credit_lag=*/0, /*use_credits=*/true, stream);
        rc.stride = off.oneshot_stride;
        comm::CePut put;
        for (int s = 1; s < w; ++s) {
          const int peer = comm::peer_at(r, s, w);
          put.src[peer] = rs ? ci + peer * bytes : ci;
          put.dst_off[peer] = off.staging + r * rc.stride;
          put.bytes[peer] = bytes;
        }
        ce_push(put, 0, stream);
        comm::launch_ce_arrive(proto, 0, stream);
        rc.own = rs ? ci + r * bytes : ci;
        rc.dst = co;
        rc.count = count;
        rc.blocks = comm::lsa_blocks_for(bytes, max_blocks);
        comm::launch_local_reduce(rc, cfg.dtype, stream);
        return;
      }
      // two-shot
      const size_t g = comm::kVecBytes / esz;
      const bool out_win = win->contains(out, bytes);
      const uint64_t land = out_win ? offset_of(out) : off.output;
      // The gather leg's landing offset is agreed with the first leg's credit (lag 0).
      comm::launch_ce_enter(proto, /*credit_lag=*/0, /*use_credits=*/true, stream, zero_copy_key(land, bytes));
      rc.stride = off.twoshot_stride;
      comm::CePut scatter;
      for (int s = 1; s < w; ++s) {
        const int peer = comm::peer_at(r, s, w);
        const comm::Range ch = comm::owner_chunk(count, w, peer, g);
        scatter.src[peer] = ci + ch.begin * esz;
        scatter.dst_off[peer] = off.staging + r * rc.stride;
        scatter.bytes[peer] = ch.size() * esz;
      }
      ce_push(scatter, 0, stream);
      comm::launch_ce_arrive(proto, 0, stream);
      const comm::Range my = comm::owner_chunk(count, w, r, g);
      if (my.size()) {
        rc.own = ci + my.begin * esz;
        rc.dst = co + my.begin * esz;
        rc.count = my.size();
        rc.blocks = comm::lsa_blocks_for(my.size() * esz, max_blocks);
        comm::launch_local_reduce(rc, cfg.dtype, stream);
      }
      // Gated by arrive(0)'s wait as well: a first leg that timed out stores no sums into peers.
      comm::CePut gather;
      for (int s = 1; s < w; ++s) {
        const int peer = comm::peer_at(r, s, w);
        gather.src[peer] = co + my.begin * esz;
        gather.dst_off[peer] = land + my.begin * esz;
        gather.bytes[peer] = my.size() * esz;
      }
      ce_push(gather, 0, stream);
      comm::launch_ce_arrive(proto, 1, stream);
      if (!out_win)
        for (int s = 1; s < w; ++s) {
          const comm::Range ch = comm::owner_chunk(count, w, comm::source_at(r, s, w), g);
          local_copy(co + ch.begin * esz, local + land + ch.begin * esz, ch.size() * esz);
        }
      return;
    }
  }
}

// ce pull all-gather, device-triggered (docs/memory_ordering.md "ce-device-trigger"):
//   main:  [stage in -> my window] -> pull_enter (ready flags; then trigger[s] = 1) -> fork
//   copy s (peer q): wait trigger[s] == 1 -> trigger[s] = 0 -> memcpy q's block -> out[q]
//   main:  [in -> out[r]] -> join -> arrive(1) ("done reading": peers may reuse their blocks)
// Each copy starts when the enter kernel stores its trigger, not when a kernel boundary and an
// event let it; the trigger words are local and always stored, so no wait depends on a peer.
void Collective::Impl::run_ce_pull_all_gather(const char* in, char* out, size_t bytes, cudaStream_t stream) {
  const int w = group->world_size(), r = group->rank();
  const WindowHandle& h = win->handle();
  // Where every rank's block lies in its window (symmetric offsets): in place with `out` in the
  // window, its block of `out`; else `in` itself if it is in the window; else staged.
  uint64_t src_off = 0, src_stride = 0;
  if (in == out + r * bytes && win->contains(out, w * bytes)) {
    src_off = offset_of(out);
    src_stride = bytes;
  } else if (in != out + r * bytes && win->contains(in, bytes)) {
    src_off = offset_of(in);
  } else {
    src_off = off.input;
    // Gated: after an abort a slow peer may still be copying the previous call's block.
    comm::launch_gated_local_copy(proto, win->local() + off.input, in, bytes, comm::lsa_blocks_for(bytes, max_blocks),
                                  stream);
  }
  // The fork follows the enter kernel (issue 16 item 5): each copy stream's wait on its trigger
  // word is then placed only after the kernel that stores the trigger has run, so the wait can
  // never sit ahead of its trigger in a shared hardware queue (one connection, graph scheduling),
  // where cuStreamWaitValue32 would block that kernel forever (it has no timeout).
  comm::launch_ce_pull_enter(proto, stream, zero_copy_key(src_off, src_stride));
  copies.fork(stream);
  uint32_t* trigger = reinterpret_cast<uint32_t*>(win->local() + off.control) + comm::kCtrlTrigger;
  for (int s = 1; s < w; ++s) {
    const int q = comm::peer_at(r, s, w);
    cudaStream_t ps = copies[s - 1];
    mem_ops->wait_eq(ps, trigger + s - 1, 1u);
    mem_ops->write(ps, trigger + s - 1, 0u);
    WEAVE_CHECK_CUDA(cudaMemcpyAsync(out + q * bytes, h.base[q] + src_off + q * src_stride, bytes,
                                     cudaMemcpyDeviceToDevice, ps));
  }
  if (in != out + r * bytes) WEAVE_CHECK_CUDA(cudaMemcpyAsync(out + r * bytes, in, bytes, cudaMemcpyDeviceToDevice, stream));
  copies.join(stream);
  comm::launch_ce_arrive(proto, 1, stream, comm::FlagKind::kDone);
}

// --- construction on a group ---
std::unique_ptr<Collective> Collective::Impl::create(comm::Group& g, const CollectiveConfig& config) {
  auto impl = std::make_unique<Impl>(g, config);
  WindowLayout layout;
  const comm::OpOffsets off = comm::add_op_regions(layout, "op", impl->shape());
  impl->attach(impl->window_group().make_window(std::move(layout)), off);
  return std::unique_ptr<Collective>(new Collective(std::move(impl)));
}

void Collective::Impl::check_shareable(const std::vector<CollectiveConfig>& configs, const char* list) {
  for (size_t i = 0; i < configs.size(); ++i)
    WEAVE_EXPECT_ARG(configs[i].algorithm != Algorithm::kNcclCopyEngine,
                     "create_sharing_window: " << list << "[" << i << "] uses algorithm 'nccl-ce', whose window belongs "
                                               << "to its own communicator split; construct it on its own");
}

std::vector<std::unique_ptr<Collective>> Collective::Impl::create_sharing(comm::Group& g,
                                                                          const std::vector<CollectiveConfig>& configs) {
  WEAVE_EXPECT_ARG(!configs.empty(), "create_sharing_window: configs must name at least one collective");
  std::vector<std::unique_ptr<Impl>> impls;
  check_shareable(configs, "configs");
  for (size_t i = 0; i < configs.size(); ++i)  // an error says which config broke the rule
    impls.push_back(with_context("create_sharing_window: configs[" + std::to_string(i) + "]",
                                 [&] { return std::make_unique<Impl>(g, configs[i]); }));
  WindowLayout layout;
  std::vector<comm::OpOffsets> offs;
  for (size_t i = 0; i < impls.size(); ++i)
    offs.push_back(comm::add_op_regions(layout, "op" + std::to_string(i), impls[i]->shape()));
  auto window = g.make_window(std::move(layout));
  std::vector<std::unique_ptr<Collective>> out;
  for (size_t i = 0; i < impls.size(); ++i) {
    impls[i]->attach(window, offs[i]);
    out.push_back(std::unique_ptr<Collective>(new Collective(std::move(impls[i]))));
  }
  return out;
}

// --- public forwarding ---
Collective::Collective(Communicator& comm, const CollectiveConfig& config) {
  auto group = comm::nccl_group(comm);
  std::unique_ptr<Collective> made = Impl::create(*group, config);
  impl_ = std::move(made->impl_);
  impl_->owned_group = std::move(group);
}

Collective::Collective(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Collective> Collective::Impl::wrap(std::unique_ptr<Impl> impl) {
  return std::unique_ptr<Collective>(new Collective(std::move(impl)));
}

std::vector<std::unique_ptr<Collective>> Collective::create_sharing_window(Communicator& comm,
                                                                           const std::vector<CollectiveConfig>& configs) {
  std::shared_ptr<comm::Group> group = comm::nccl_group(comm);
  auto ops = Impl::create_sharing(*group, configs);
  for (auto& op : ops) op->impl_->owned_group = group;  // every op keeps the group alive
  return ops;
}

const SymmetricWindow& Collective::window() const {
  const SymmetricWindow* sym = impl_->win->symmetric();
  WEAVE_EXPECT(sym != nullptr, Status::kUnavailable, "Collective::window: this op's window is not an NCCL symmetric "
                                                     "window (emulated world, tests only)");
  return *sym;
}
Collective::~Collective() = default;
const CollectiveConfig& Collective::config() const noexcept { return impl_->cfg; }
Transport Collective::transport() const noexcept { return impl_->plan.transport; }
Algorithm Collective::algorithm() const noexcept { return impl_->plan.algorithm; }
void Collective::run(const void* in, void* out, std::size_t count, cudaStream_t stream) { impl_->run(in, out, count, stream); }
void* Collective::window_input() const noexcept { return impl_->win->local() + impl_->off.input; }
void* Collective::window_output() const noexcept { return impl_->win->local() + impl_->off.output; }
void* Collective::peer_window_output(int r) const { return impl_->win->peer(r) + impl_->off.output; }
void Collective::check() const { impl_->check(); }

std::string Collective::describe() const {
  std::ostringstream os;
  os << to_string(impl_->cfg.op);
  if (impl_->cfg.op != CollectiveOp::kAllGather) os << " " << to_string(impl_->cfg.dtype);
  os << " over " << to_string(impl_->plan.transport) << " (" << to_string(impl_->plan.algorithm) << "), rank "
     << impl_->group->rank() << "/" << impl_->group->world_size() << ", window " << impl_->win->bytes() << " bytes"
     << (impl_->rt->window_ptr().use_count() > 1
             ? " (shared by " + std::to_string(impl_->rt->window_ptr().use_count()) + " ops)"
             : std::string())
     << ", "
     << impl_->max_blocks << " max blocks, credits " << (impl_->cfg.flow_control ? "on" : "OFF (testing)")
     << "; " << impl_->plan.reason;
  return os.str();
}

}  // namespace weave
