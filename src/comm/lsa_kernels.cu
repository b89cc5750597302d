// lsa transport: one kernel per call; SM 16-byte loads/stores to peers' windows over NVLink.
//
//   push all-gather, rank r, CTA b (part b of every chunk):
//     credits(ready e, wait peers' ready >= e) -> for step s: store in[b] -> peer(r+s).land[r][b]
//     -> release flag[0][r][b] at peers -> acquire flags[0][*][b] -> (copy landed parts to out)
//   pull all-gather: stage in[b] into own window -> flag[0] "ready" -> acquire peers' ready ->
//     load peer.window[q][b] -> out[q][b] -> flag[1] "done reading" -> wait peers' done (so the
//     sender may reuse its input after the call)
//   reduce-scatter / one-shot all-reduce: push to peer staging slot[e % 2][r] -> flags ->
//     reduce slots in rank order 0..w-1 (fp32) -> out
//   two-shot all-reduce: push chunk q to owner q's staging -> flags[0] -> owner reduces its
//     chunk, stores it to its out and to every peer's landing area -> flags[1] -> (copy out)
#include <cuda_bf16.h>

#include <algorithm>
#include <utility>

#include "comm/call_protocol.cuh"
#include "comm/kernels.hpp"
#include "comm/op_layout.hpp"
#include "common/check.hpp"
#include "common/memo.hpp"

namespace weave::comm {

namespace {

// Two CTAs per SM fit the 2-rank reductions in 64 registers; the 4- and 8-rank pointer arrays need
// more, so those instantiations run one CTA per SM instead of spilling.
template <int W>
inline constexpr int kMinBlocks = W <= 2 ? 2 : 1;

__device__ __forceinline__ char* staging_at(const LsaCall& c, int owner, uint32_t slot, int src) {
  return c.p.win.base[owner] + c.staging + slot * c.slot_bytes + static_cast<uint64_t>(src) * c.stride;
}

__global__ void __launch_bounds__(kLsaThreads, 1) all_gather_push_kernel(const LsaCall c) {
  const Proto& p = c.p;
  CallEpoch call;
  if (!begin_call(p, &call)) return;
  const uint32_t e = call.e;
  if (!exchange_credits(p, e, c.credit_lag, c.zc)) return;  // c.zc: the landing offset, where there is one
  const int w = p.win.world, r = p.win.rank, t = threadIdx.x, nth = blockDim.x;
  const size_t n = c.count;
  const Range part = part_range(n, gridDim.x, blockIdx.x, kVecBytes);
  const char* src = c.in + part.begin;
  for (int s = 1; s < w; ++s) {
    const int peer = peer_at(r, s, w);
    copy_bytes(p.win.base[peer] + c.land + r * n + part.begin, src, part.size(), t, nth);
  }
  if (!c.in_place) copy_bytes(c.out + r * n + part.begin, src, part.size(), t, nth);
  signal_peers(p, 0, e);
  if (!wait_peers(p, 0, e, FlagKind::kArrival)) return;
  if (c.copy_out)
    for (int s = 1; s < w; ++s) {
      const int q = source_at(r, s, w);
      copy_bytes(c.out + q * n + part.begin, p.win.base[r] + c.land + q * n + part.begin, part.size(), t, nth);
    }
  end_call(p, call);
}

// docs/memory_ordering.md "pull-done".
__global__ void __launch_bounds__(kLsaThreads, 1) all_gather_pull_kernel(const LsaCall c) {
  const Proto& p = c.p;
  CallEpoch call;
  if (!begin_call(p, &call)) return;
  const uint32_t e = call.e;
  const int w = p.win.world, r = p.win.rank, t = threadIdx.x, nth = blockDim.x;
  const size_t n = c.count;
  const Range part = part_range(n, gridDim.x, blockIdx.x, kVecBytes);
  if (c.stage_in)
    copy_bytes(p.win.base[r] + c.src_off + r * c.src_stride + part.begin, c.in + part.begin, part.size(), t, nth);
  if (t < w && t != r) publish_zc(p, t, c.zc);  // where my block is; ordered by the flag's release
  signal_peers(p, 0, e);  // "my part b is readable"
  if (!c.in_place) copy_bytes(c.out + r * n + part.begin, c.in + part.begin, part.size(), t, nth);
  if (!wait_peers(p, 0, e, FlagKind::kReady, c.zc)) return;  // ... and the peer's block is where I read it
  for (int s = 1; s < w; ++s) {
    const int q = peer_at(r, s, w);
    copy_bytes(c.out + q * n + part.begin, p.win.base[q] + c.src_off + q * c.src_stride + part.begin, part.size(), t,
               nth);
  }
  signal_peers(p, 1, e);  // "done reading your part b": your input may change after the call
  if (!wait_peers(p, 1, e, FlagKind::kDone)) return;
  end_call(p, call);
}

template <typename T, int W>
__global__ void __launch_bounds__(kLsaThreads, kMinBlocks<W>) reduce_scatter_kernel(const LsaCall c) {
  const Proto& p = c.p;
  CallEpoch call;
  if (!begin_call(p, &call)) return;
  const uint32_t e = call.e;
  if (!exchange_credits(p, e, c.credit_lag, c.zc)) return;  // c.zc: the landing offset, where there is one
  const int w = p.win.world, r = p.win.rank, t = threadIdx.x, nth = blockDim.x;
  const size_t n = c.count;
  const uint32_t slot = slot_of(e, c.slots);
  const Range part = part_range(n, gridDim.x, blockIdx.x, kVecBytes / sizeof(T));
  const T* in = reinterpret_cast<const T*>(c.in);
  for (int s = 1; s < w; ++s) {
    const int peer = peer_at(r, s, w);
    copy_bytes(staging_at(c, peer, slot, r) + part.begin * sizeof(T),
               reinterpret_cast<const char*>(in + peer * n + part.begin), part.size() * sizeof(T), t, nth);
  }
  signal_peers(p, 0, e);
  if (!wait_peers(p, 0, e, FlagKind::kArrival)) return;
  const T* srcs[W] = {};
#pragma unroll
  for (int q = 0; q < W; ++q)
    if (q < w) srcs[q] = q == r ? in + r * n : reinterpret_cast<const T*>(staging_at(c, r, slot, q));
  T* const dsts[W + 1] = {reinterpret_cast<T*>(c.out)};
  reduce_range<T, W>(srcs, w, dsts, 1, part.begin, part.end, t, nth);
  end_call(p, call);
}

template <typename T, int W>
__global__ void __launch_bounds__(kLsaThreads, kMinBlocks<W>) all_reduce_one_shot_kernel(const LsaCall c) {
  const Proto& p = c.p;
  CallEpoch call;
  if (!begin_call(p, &call)) return;
  const uint32_t e = call.e;
  if (!exchange_credits(p, e, c.credit_lag, c.zc)) return;  // c.zc: the landing offset, where there is one
  const int w = p.win.world, r = p.win.rank, t = threadIdx.x, nth = blockDim.x;
  const uint32_t slot = slot_of(e, c.slots);
  const Range part = part_range(c.count, gridDim.x, blockIdx.x, kVecBytes / sizeof(T));
  const T* in = reinterpret_cast<const T*>(c.in);
  for (int s = 1; s < w; ++s) {
    const int peer = peer_at(r, s, w);
    copy_bytes(staging_at(c, peer, slot, r) + part.begin * sizeof(T), reinterpret_cast<const char*>(in + part.begin),
               part.size() * sizeof(T), t, nth);
  }
  signal_peers(p, 0, e);
  if (!wait_peers(p, 0, e, FlagKind::kArrival)) return;
  const T* srcs[W] = {};
#pragma unroll
  for (int q = 0; q < W; ++q)
    if (q < w) srcs[q] = q == r ? in : reinterpret_cast<const T*>(staging_at(c, r, slot, q));
  T* const dsts[W + 1] = {reinterpret_cast<T*>(c.out)};
  reduce_range<T, W>(srcs, w, dsts, 1, part.begin, part.end, t, nth);
  end_call(p, call);
}

template <typename T, int W>
__global__ void __launch_bounds__(kLsaThreads, kMinBlocks<W>) all_reduce_two_shot_kernel(const LsaCall c) {
  const Proto& p = c.p;
  CallEpoch call;
  if (!begin_call(p, &call)) return;
  const uint32_t e = call.e;
  if (!exchange_credits(p, e, c.credit_lag, c.zc)) return;  // c.zc: the landing offset, where there is one
  const int w = p.win.world, r = p.win.rank, t = threadIdx.x, nth = blockDim.x;
  const size_t granule = kVecBytes / sizeof(T);
  const uint32_t slot = slot_of(e, c.slots);
  const T* in = reinterpret_cast<const T*>(c.in);
  // Reduce-scatter leg: part b of chunk q goes to owner q's staging slot [r].
  for (int s = 1; s < w; ++s) {
    const int peer = peer_at(r, s, w);
    const Range ch = owner_chunk(c.count, w, peer, granule);
    const Range pp = part_range(ch.size(), gridDim.x, blockIdx.x, granule);
    copy_bytes(staging_at(c, peer, slot, r) + pp.begin * sizeof(T),
               reinterpret_cast<const char*>(in + ch.begin + pp.begin), pp.size() * sizeof(T), t, nth);
  }
  signal_peers(p, 0, e);
  if (!wait_peers(p, 0, e, FlagKind::kArrival)) return;
  // Owner: reduce part b of my chunk in rank order, store it locally and at every peer.
  const Range my = owner_chunk(c.count, w, r, granule);
  const Range mp = part_range(my.size(), gridDim.x, blockIdx.x, granule);
  const T* srcs[W] = {};
#pragma unroll
  for (int q = 0; q < W; ++q)
    if (q < w) srcs[q] = q == r ? in + my.begin : reinterpret_cast<const T*>(staging_at(c, r, slot, q));
  T* dsts[W + 1] = {};
  dsts[0] = reinterpret_cast<T*>(c.out) + my.begin;
#pragma unroll
  for (int s = 1; s < W; ++s)
    if (s < w) dsts[s] = reinterpret_cast<T*>(p.win.base[peer_at(r, s, w)] + c.land) + my.begin;
  reduce_range<T, W>(srcs, w, dsts, w, mp.begin, mp.end, t, nth);
  // All-gather leg.
  signal_peers(p, 1, e);
  if (!wait_peers(p, 1, e, FlagKind::kArrival)) return;
  if (c.copy_out)
    for (int s = 1; s < w; ++s) {
      const int q = source_at(r, s, w);
      const Range ch = owner_chunk(c.count, w, q, granule);
      const Range pq = part_range(ch.size(), gridDim.x, blockIdx.x, granule);
      copy_bytes(c.out + (ch.begin + pq.begin) * sizeof(T),
                 p.win.base[r] + c.land + (ch.begin + pq.begin) * sizeof(T), pq.size() * sizeof(T), t, nth);
    }
  end_call(p, call);
}

template <typename Kernel>
void launch(Kernel kernel, const LsaCall& c, cudaStream_t stream) {
  launch_lsa_kernel(kernel, c, stream);
}

}  // namespace

void launch_lsa_all_gather_push(const LsaCall& c, cudaStream_t stream) { launch(all_gather_push_kernel, c, stream); }
void launch_lsa_all_gather_pull(const LsaCall& c, cudaStream_t stream) { launch(all_gather_pull_kernel, c, stream); }

void launch_lsa_reduce_scatter(const LsaCall& c, DType dtype, cudaStream_t stream) {
  dispatch_world(c.p.win.world, [&](auto w) {
    constexpr int W = decltype(w)::value;
    if (dtype == DType::kBF16) launch(reduce_scatter_kernel<__nv_bfloat16, W>, c, stream);
    else launch(reduce_scatter_kernel<float, W>, c, stream);
  });
}
void launch_lsa_all_reduce_one_shot(const LsaCall& c, DType dtype, cudaStream_t stream) {
  dispatch_world(c.p.win.world, [&](auto w) {
    constexpr int W = decltype(w)::value;
    if (dtype == DType::kBF16) launch(all_reduce_one_shot_kernel<__nv_bfloat16, W>, c, stream);
    else launch(all_reduce_one_shot_kernel<float, W>, c, stream);
  });
}
void launch_lsa_all_reduce_two_shot(const LsaCall& c, DType dtype, cudaStream_t stream) {
  dispatch_world(c.p.win.world, [&](auto w) {
    constexpr int W = decltype(w)::value;
    if (dtype == DType::kBF16) launch(all_reduce_two_shot_kernel<__nv_bfloat16, W>, c, stream);
    else launch(all_reduce_two_shot_kernel<float, W>, c, stream);
  });
}

int lsa_max_blocks(int device, int world) {
  int sms = 0, per_sm = 0;
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  dispatch_world(world, [&](auto w) {
    constexpr int W = decltype(w)::value;
    WEAVE_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, all_reduce_two_shot_kernel<float, W>,
                                                                   kLsaThreads, 0));
  });
  return std::max(1, sms * std::clamp(per_sm, 1, 2));
}

int co_resident_blocks(const void* kernel, int threads) {
  static Memo<std::pair<const void*, int>, int> memo;  // (kernel, device) -> CTAs
  int device = 0;
  WEAVE_CHECK_CUDA(cudaGetDevice(&device));
  return memo.get({kernel, device}, [&] {
    int sms = 0, per_sm = 0;
    WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    WEAVE_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
    return std::max(1, sms * per_sm);
  });
}

int device_sms() {
  static Memo<int, int> memo;
  int device = 0;
  WEAVE_CHECK_CUDA(cudaGetDevice(&device));
  return memo.get(device, [&] {
    int sms = 0;
    WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  });
}

int lsa_blocks_for(size_t bytes, int max_blocks) {
  const size_t want = ceil_div(bytes == 0 ? 1 : bytes, size_t(32) << 10);
  return static_cast<int>(std::clamp<size_t>(want, 1, static_cast<size_t>(std::max(1, max_blocks))));
}

}  // namespace weave::comm
