// Small protocol kernels: op initialisation, and the ce transport's enter / arrive steps, its
// gated put into peers and its local reduction. Local copies are cudaMemcpyAsync calls
// (collective_ce.cpp); so are the pull's device-triggered reads and the ungated negative control.
//
//   ce call e, rank r:   [enter: e = epoch + 1; ready -> peers; wait peers' ready >= e - lag]
//                        -> [put: nothing if aborted; else SM stores into the peers' windows]
//                        -> [arrive(phase): flag -> peers; wait peers' flags >= e]
//                        -> (reduce / copy out on the caller's stream)
// docs/memory_ordering.md "ce-completion": the arrive kernel starts only after the puts have
// completed in stream order; its release-store of the flag follows them.
#include <cuda_bf16.h>

#include "comm/call_protocol.cuh"
#include "comm/kernels.hpp"
#include "comm/op_layout.hpp"
#include "common/check.hpp"

namespace weave::comm {

namespace {

// Every word of the op's control (epoch = initial, aborted = 0, election = 0), credits and flags
// regions starts at `initial`: stale zeros from the window's creation would otherwise read as a
// future epoch once epochs start near 2^32.
__global__ void init_op_kernel(const Proto p, uint32_t initial, uint32_t slot_lag) {
  uint32_t* ctrl = ctrl_word(p, 0);
  const size_t nflags = static_cast<size_t>(kFlagPhases) * p.win.world * p.max_blocks;
  uint32_t* flags = reinterpret_cast<uint32_t*>(p.win.base[p.win.rank] + p.flags);
  uint32_t* credits = reinterpret_cast<uint32_t*>(p.win.base[p.win.rank] + p.credits);
  const size_t tid = blockIdx.x * size_t(blockDim.x) + threadIdx.x, nth = size_t(gridDim.x) * blockDim.x;
  for (size_t i = tid; i < nflags; i += nth) flags[i] = initial - slot_lag;
  for (size_t i = tid; i < static_cast<size_t>(p.win.world); i += nth) credits[i] = initial - slot_lag;
  if (tid == 0) {
    // Every control word starts at 0 (abort word, election counters, ce triggers, the fused ops'
    // chunk counters), then the epoch.
    for (size_t w = 0; w < kControlBytes / 4; ++w) ctrl[w] = 0;
    ctrl[kCtrlEpoch] = initial;
  }
}

// docs/memory_ordering.md "ce-gate": this kernel's waits decide whether the call may write into
// its peers. It records every failure in the op's abort word (a timed-out credit, a mismatched
// zero-copy key), and the gated put kernels that follow it on the stream read that word and store
// nothing once it is set.
__global__ void ce_enter_kernel(const Proto p, uint32_t lag, int use_credits, const ZeroCopyKey zc) {
  __shared__ uint32_t s_epoch;
  bool bad = false;
  if (threadIdx.x == 0) {
    bad = aborted(p);
    s_epoch = *reinterpret_cast<volatile uint32_t*>(ctrl_word(p, kCtrlEpoch)) + 1u;
    // One CTA: the epoch of this call is stored at once; the call's later kernels read it.
    if (!bad) *reinterpret_cast<volatile uint32_t*>(ctrl_word(p, kCtrlEpoch)) = s_epoch;
  }
  if (__syncthreads_or(bad)) return;
  if (use_credits) exchange_credits(p, s_epoch, lag, zc);
}

// ce pull, device-triggered (docs/memory_ordering.md "ce-device-trigger"): e = epoch + 1
// (stored); flag[0] = e at every peer ("my block is readable": my earlier stream work, which wrote
// it, is complete); wait for every peer's flag[0] >= e (bounded; skipped in the negative control,
// flow_control = 0); then store trigger[s] = 1 for every copy stream, which is waiting on it with
// cuStreamWaitValue32. The triggers are stored on every path, aborted ones included: those waits
// have no bound of their own, and the copies only read peers' windows into this rank's output.
// The zero-copy key (where my block is) goes out before the ready flag and the peers' keys are
// compared after theirs ("zero-copy-offsets"); a mismatch is recorded, the triggers still stored.
__global__ void ce_pull_enter_kernel(const Proto p, const ZeroCopyKey zc) {
  __shared__ uint32_t s_epoch;
  const int t = threadIdx.x, w = p.win.world, r = p.win.rank;
  bool bad = false;
  if (t == 0) {
    bad = aborted(p);
    s_epoch = *reinterpret_cast<volatile uint32_t*>(ctrl_word(p, kCtrlEpoch)) + 1u;
    if (!bad) *reinterpret_cast<volatile uint32_t*>(ctrl_word(p, kCtrlEpoch)) = s_epoch;
  }
  bad = __syncthreads_or(bad);
  const uint32_t e = s_epoch;
  if (!bad && t < w && t != r) {
    publish_zc(p, t, zc);
    publish(flag_slot(p, t, 0, r, 0), e);
    if (p.flow_control && wait_reached(p, flag_slot(p, r, 0, t, 0), e, t, 0, FlagKind::kReady)) zc_matches(p, t, zc);
  }
  __syncthreads();
  if (t >= 1 && t < w) ptx::st_release_sys_u32(ctrl_word(p, kCtrlTrigger + t - 1), 1u);
}

__global__ void ce_arrive_kernel(const Proto p, int phase, FlagKind kind) {
  const int t = threadIdx.x, w = p.win.world, r = p.win.rank;
  if (aborted(p)) return;
  const uint32_t e = *reinterpret_cast<volatile uint32_t*>(ctrl_word(p, kCtrlEpoch));
  if (t < w && t != r) {
    publish(flag_slot(p, t, phase, r, 0), e);
    wait_reached(p, flag_slot(p, r, phase, t, 0), e, t, phase, kind);
  }
}

template <typename T, int W>
__global__ void __launch_bounds__(kLsaThreads, W <= 2 ? 2 : 1) local_reduce_kernel(const ReduceCall c) {
  const Proto& p = c.p;
  if (aborted(p)) return;
  testing_delay(c.receive_delay_ns);  // 0 outside the credit's negative control
  const int w = p.win.world, r = p.win.rank;
  const uint32_t e = *reinterpret_cast<volatile uint32_t*>(ctrl_word(p, kCtrlEpoch));
  const uint32_t slot = slot_of(e, c.slots);
  const T* srcs[W] = {};
#pragma unroll
  for (int q = 0; q < W; ++q)
    if (q < w)
      srcs[q] = q == r ? reinterpret_cast<const T*>(c.own)
                       : reinterpret_cast<const T*>(p.win.base[r] + c.staging + slot * c.slot_bytes + q * c.stride);
  T* const dsts[W + 1] = {reinterpret_cast<T*>(c.dst)};
  const Range part = part_range(c.count, gridDim.x, blockIdx.x, kVecBytes / sizeof(T));
  reduce_range<T, W>(srcs, w, dsts, 1, part.begin, part.end, threadIdx.x, blockDim.x);
}

__global__ void __launch_bounds__(kLsaThreads, 1) sm_put_kernel(const Proto p, uint64_t dst_off, const char* src,
                                                                  size_t bytes) {
  if (aborted(p)) return;
  const int w = p.win.world, r = p.win.rank;
  const Range part = part_range(bytes, gridDim.x, blockIdx.x, kVecBytes);
  for (int s = 1; s < w; ++s)
    copy_bytes(p.win.base[peer_at(r, s, w)] + dst_off + part.begin, src + part.begin, part.size(), threadIdx.x,
               blockDim.x);
  __threadfence_system();  // the stores are performed before this kernel counts as complete
}

// The ce pull all-gather's staging of `in` into this rank's window block ("ce-device-trigger"):
// after an abort (a peer's done-reading wait of the previous call timed out) a slow peer may still
// be copying the block, so an aborted op stores nothing here. A copy-engine copy cannot be gated.
__global__ void __launch_bounds__(kLsaThreads, 1) gated_local_copy_kernel(const Proto p, char* dst, const char* src,
                                                                            size_t bytes) {
  if (aborted(p)) return;
  const Range part = part_range(bytes, gridDim.x, blockIdx.x, kVecBytes);
  copy_bytes(dst + part.begin, src + part.begin, part.size(), threadIdx.x, blockDim.x);
}

// The same for `rows` rows of `row_bytes` at pitches (AllGatherGemm fused-ce's staging of A_r and
// its scales into its slot, "agm-fused-ce"). With 16-byte aligned rows every thread of the grid
// copies 16-byte units of the whole [rows, row_bytes] block, four loads in flight (a CTA per row
// with one unit per thread was latency-bound: about 1.5 us a row); else row by row.
__global__ void __launch_bounds__(kLsaThreads, 1) gated_rows_copy_kernel(const Proto p, char* dst, size_t dst_pitch,
                                                                           const char* src, size_t src_pitch,
                                                                           size_t row_bytes, int64_t rows) {
  if (aborted(p)) return;
  const bool aligned = ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | dst_pitch | src_pitch |
                         row_bytes) & 15u) == 0;
  if (!aligned) {
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x)
      copy_bytes(dst + row * dst_pitch, src + row * src_pitch, row_bytes, threadIdx.x, blockDim.x);
    return;
  }
  const size_t row_units = row_bytes / 16, units = row_units * static_cast<size_t>(rows);
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  auto at = [&](char* base, size_t pitch, size_t u) {
    return reinterpret_cast<int4*>(base + (u / row_units) * pitch + (u % row_units) * 16);
  };
  size_t u = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; u + 3 * step < units; u += 4 * step) {
    int4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = *at(const_cast<char*>(src), src_pitch, u + j * step);
#pragma unroll
    for (int j = 0; j < 4; ++j) *at(dst, dst_pitch, u + j * step) = v[j];
  }
  for (; u < units; u += step) *at(dst, dst_pitch, u) = *at(const_cast<char*>(src), src_pitch, u);
}

// Testing only: one thread spins `ns` (a slow copy stream: the work queued behind it starts late).
__global__ void testing_delay_kernel(uint64_t ns) { delay_for_testing(ns); }

// docs/memory_ordering.md "ce-gate". Runs after ce_enter_kernel (or the arrive kernel of the
// previous leg) on the same stream, so it reads the abort word those kernels' waits set: once set,
// this call never stores into a peer (a slow peer's live output or staging stays intact). A copy
// engine copy cannot be made conditional on a device word (a stream wait only delays it; an
// aborted call must release every wait, and the copy then runs), hence SM stores.
__global__ void __launch_bounds__(kLsaThreads, 1) ce_put_kernel(const CePut c) {
  const Proto& p = c.p;
  if (aborted(p)) return;
  const int w = p.win.world, r = p.win.rank;
  for (int s = 1; s < w; ++s) {
    const int q = peer_at(r, s, w);
    const Range part = part_range(c.bytes[q], gridDim.x, blockIdx.x, kVecBytes);
    copy_bytes(p.win.base[q] + c.dst_off[q] + part.begin, c.src[q] + part.begin, part.size(), threadIdx.x, blockDim.x);
  }
  __threadfence_system();  // the stores are performed before this kernel counts as complete ("ce-completion")
}

}  // namespace

void launch_ce_put(const CePut& c, cudaStream_t stream) {
  ce_put_kernel<<<c.blocks, kLsaThreads, 0, stream>>>(c);
  WEAVE_CHECK_LAUNCH();
}

void launch_gated_local_copy(const Proto& p, char* dst, const char* src, size_t bytes, int blocks,
                             cudaStream_t stream) {
  gated_local_copy_kernel<<<blocks, kLsaThreads, 0, stream>>>(p, dst, src, bytes);
  WEAVE_CHECK_LAUNCH();
}

void launch_gated_rows_copy(const Proto& p, char* dst, size_t dst_pitch, const char* src, size_t src_pitch,
                            size_t row_bytes, int64_t rows, int blocks, cudaStream_t stream) {
  if (rows <= 0 || row_bytes == 0) return;
  gated_rows_copy_kernel<<<blocks, kLsaThreads, 0, stream>>>(p, dst, dst_pitch, src, src_pitch, row_bytes, rows);
  WEAVE_CHECK_LAUNCH();
}

void launch_testing_delay(uint64_t ns, cudaStream_t stream) {
  testing_delay_kernel<<<1, 1, 0, stream>>>(ns);
  WEAVE_CHECK_LAUNCH();
}

void launch_sm_put(const Proto& p, uint64_t dst_off, const char* src, size_t bytes, int blocks, cudaStream_t stream) {
  sm_put_kernel<<<blocks, kLsaThreads, 0, stream>>>(p, dst_off, src, bytes);
  WEAVE_CHECK_LAUNCH();
}

void launch_init_op(const Proto& p, uint32_t initial_epoch, cudaStream_t stream, uint32_t slot_lag) {
  init_op_kernel<<<16, 256, 0, stream>>>(p, initial_epoch, slot_lag);
  WEAVE_CHECK_LAUNCH();
}

void launch_ce_pull_enter(const Proto& p, cudaStream_t stream, const ZeroCopyKey& zc) {
  ce_pull_enter_kernel<<<1, 32, 0, stream>>>(p, zc);
  WEAVE_CHECK_LAUNCH();
}

void launch_ce_enter(const Proto& p, uint32_t credit_lag, bool use_credits, cudaStream_t stream,
                     const ZeroCopyKey& zc) {
  ce_enter_kernel<<<1, 32, 0, stream>>>(p, credit_lag, use_credits ? 1 : 0, zc);
  WEAVE_CHECK_LAUNCH();
}

void launch_ce_arrive(const Proto& p, int phase, cudaStream_t stream, FlagKind kind) {
  ce_arrive_kernel<<<1, 32, 0, stream>>>(p, phase, kind);
  WEAVE_CHECK_LAUNCH();
}

void launch_local_reduce(const ReduceCall& c, DType dtype, cudaStream_t stream) {
  dispatch_world(c.p.win.world, [&](auto w) {
    constexpr int W = decltype(w)::value;
    if (dtype == DType::kBF16) local_reduce_kernel<__nv_bfloat16, W><<<c.blocks, kLsaThreads, 0, stream>>>(c);
    else local_reduce_kernel<float, W><<<c.blocks, kLsaThreads, 0, stream>>>(c);
  });
  WEAVE_CHECK_LAUNCH();
}

}  // namespace weave::comm
