// weave::Collective::run: the call's argument checks and transport dispatch, and the nccl and lsa
// transports' calls (the ce transport's: collective_ce.cpp). run() only enqueues: no allocation, no
// host sync, graph-capturable.
#include "comm/collective_impl.hpp"
#include "comm/protocol.hpp"
#include "comm/receive_delay.hpp"
#include "comm/transport_build.hpp"
#include "common/check.hpp"

namespace weave {

namespace {

bool overlaps(const void* a, size_t na, const void* b, size_t nb) {
  const auto* x = static_cast<const char*>(a);
  const auto* y = static_cast<const char*>(b);
  return x < y + nb && y < x + na;
}

ncclDataType_t nccl_type(DType d) { return d == DType::kBF16 ? ncclBfloat16 : ncclFloat32; }

}  // namespace

void Collective::Impl::run(const void* in, void* out, size_t count, cudaStream_t stream) {
  comm::OpRuntime::CallGuard guard(*rt, to_string(cfg.op), stream);
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
  // docs/comm.md "NCCL symmetric kernels": with both buffers in a symmetric window NCCL 2.28.9
  // returned wrong data for all-gather and reduce-scatter blocks whose size is not a multiple of
  // 4 bytes (Collectives.NcclSymmetricKernelsOnOddSizesCharacterised). Refuse rather than return it.
  WEAVE_EXPECT(!nccl_symmetric_defect(in, out, count), Status::kUnsupported,
               to_string(cfg.op) << " over nccl: " << count * esz
                                 << " bytes per rank with both buffers in the symmetric window would run NCCL's "
                                    "symmetric kernels, which returned wrong data for block sizes that are not a "
                                    "multiple of 4 bytes in weave's self-test (NCCL 2.28.9); pass buffers outside "
                                    "the window, or use the ce or lsa transport");
  WEAVE_EXPECT(comm::transport_compiled_in(plan.transport), Status::kUnavailable,
               "transport '" << to_string(plan.transport) << "' is compiled out");
  WEAVE_CHECK_CUDA(cudaSetDevice(group->device()));
  // Every check passed: from here an escaping error breaks the op (its words may be half-advanced).
  guard.enqueueing();
  switch (plan.transport) {
    case Transport::kNccl:
#if WEAVE_ENABLE_NCCL_TRANSPORT
      run_nccl(in, out, count, stream);
#endif
      break;
    case Transport::kLsa:
#if WEAVE_ENABLE_LSA
      run_lsa(in, out, count, stream);
#endif
      break;
    case Transport::kCe:
#if WEAVE_ENABLE_CE
      run_ce(in, out, count, stream);
#endif
      break;
  }
  (void)stream;  // unused only in a build with every transport compiled out
  WEAVE_EXPECT(!fail_after_enqueue_for_testing, Status::kInternal,
               to_string(cfg.op) << ": raised after enqueueing (fail_after_enqueue_for_testing)");
}

bool Collective::Impl::nccl_symmetric_defect(const void* in, const void* out, size_t count) const {
  if (plan.transport != Transport::kNccl || cfg.op == CollectiveOp::kAllReduce || (count * esz) % 4 == 0) return false;
  const int w = group->world_size();
  const size_t in_bytes = (cfg.op == CollectiveOp::kReduceScatter ? w : 1) * count * esz;
  const size_t out_bytes = (cfg.op == CollectiveOp::kAllGather ? w : 1) * count * esz;
  return win->contains(in, in_bytes) && win->contains(out, out_bytes);
}

void Collective::Impl::run_nccl(const void* in, void* out, size_t count, cudaStream_t stream) {
  const ncclComm_t c = nccl_comm();  // run() refused the symmetric-kernel defect before enqueueing
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
    l.slots = hooks.flow_control ? comm::kLLSlots : 1;
    l.receive_delay_ns = receive_delay_of(hooks, r, w);
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

}  // namespace weave
