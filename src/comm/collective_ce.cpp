// weave::Collective's ce transport: the calls whose writes into peers are copy-engine copies or
// gated SM puts, and the device-triggered pull all-gather. run() only enqueues.
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

#include "comm/collective_impl.hpp"
#include "comm/protocol.hpp"
#include "comm/receive_delay.hpp"
#include "common/check.hpp"

namespace weave {

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
  if (!hooks.ce_ungated_peer_copies) {
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
  rc.receive_delay_ns = receive_delay_of(hooks, r, w);  // the credit's negative control
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

}  // namespace weave
