#include "fused/all_reduce/tail.hpp"

#include <cuda_bf16.h>

#include <algorithm>

#include "comm/device_common.cuh"
#include "common/check.hpp"
#include "fused/all_reduce/counters.cuh"
#include "fused/call_words.cuh"

namespace weave::fused {

namespace {

constexpr int kTailThreads = 256;

__global__ void __launch_bounds__(kTailThreads) ar_tail_kernel(const __grid_constant__ ArTailParams t) {
  const comm::Proto& pr = t.p;
  const int w = pr.win.world, r = pr.win.rank;
  __shared__ uint32_t words[2];
  if (threadIdx.x == 0) open_call(pr, words);
  __syncthreads();
  const uint32_t e = words[0];
  const ArSchedule& s = t.sched;
  const int row0 = ar_band_begin(s, r) * t.block_m;
  const int row_end = min(ar_band_end(s, r) * t.block_m, t.m);
  const char* slots = pr.win.base[r] + t.staging;
  const int vecs = t.n / 8;  // n is a multiple of 8 (GemmAllReduce::validate)
  int waited = -1;
  for (int row = row0 + static_cast<int>(blockIdx.x); row < row_end; row += static_cast<int>(gridDim.x)) {
    const int m_blk = row / t.block_m, chunk = ar_chunk_of(s, m_blk);
    if (chunk != waited) {
      if (static_cast<int>(threadIdx.x) < w && !t.skip_partial_wait && !comm::aborted(pr)) {
        const int q = static_cast<int>(threadIdx.x);
        (void)wait_with_key(pr, comm::flag_slot(pr, r, 0, q, chunk), q, 0, t.m, e);
      }
      __syncthreads();  // "consume-acquire": the waiters' acquires order every thread's loads below
      waited = chunk;
    }
    // One decision for the whole CTA (issue 36 item 6): a row goes to the peers whole or not at all,
    // and thread 0's count below follows the same decision as every thread's stores.
    const bool to_peers = !__syncthreads_or(comm::aborted(pr) ? 1 : 0);
    const size_t in_row = static_cast<size_t>(row - row0) * static_cast<size_t>(t.n) * 2;
    const size_t out_row = t.out + static_cast<size_t>(row) * static_cast<size_t>(t.n) * 2;
    for (int v = static_cast<int>(threadIdx.x); v < vecs; v += kTailThreads) {
      float acc[8];
      for (int q = 0; q < w; ++q) {
        const uint4 x = *reinterpret_cast<const uint4*>(slots + static_cast<size_t>(q) * t.slot_stride + in_row +
                                                        static_cast<size_t>(v) * 16);
        const uint32_t bits[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          __nv_bfloat162 pair;
          *reinterpret_cast<uint32_t*>(&pair) = bits[i];
          const float2 f = __bfloat1622float2(pair);
          // As comm/device_common.cuh reduce_range: the first term, then += in rank order.
          acc[2 * i] = q == 0 ? f.x : acc[2 * i] + f.x;
          acc[2 * i + 1] = q == 0 ? f.y : acc[2 * i + 1] + f.y;
        }
      }
      uint4 y;
      uint32_t* ybits = reinterpret_cast<uint32_t*>(&y);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const __nv_bfloat162 pair = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
        ybits[i] = *reinterpret_cast<const uint32_t*>(&pair);
      }
      const size_t off = out_row + static_cast<size_t>(v) * 16;
      *reinterpret_cast<uint4*>(pr.win.base[r] + off) = y;
      if (to_peers)
        for (int st = 1; st < w; ++st) *reinterpret_cast<uint4*>(pr.win.base[comm::peer_at(r, st, w)] + off) = y;
    }
    __syncthreads();  // every thread's stores of this row before thread 0's count ("publish-release")
    if (threadIdx.x == 0 && to_peers) {
      const ArChunkRows rows = ar_chunk_row_range(s, r, chunk, t.block_m, t.m);
      if (count_and_elect(ar_ag_counter(pr, chunk), static_cast<uint32_t>(rows.rows)))
        for (int st = 1; st < w; ++st) {
          const int q = comm::peer_at(r, st, w);
          publish_with_key(pr, comm::flag_slot(pr, q, 1, r, chunk), q, t.m, e);
        }
    }
  }
  // The end of the call: the last ticket waits for every peer's final chunks, then closes.
  if (threadIdx.x >= 32 || !holds_last_ticket(words)) return;
  const int lane = static_cast<int>(threadIdx.x);
  bool ok = true;
  if (!t.skip_arrival_wait && !comm::aborted(pr)) {
    const int per_peer = s.max_chunks;  // band q has at most as many chunks as band 0
    for (int i = lane; i < (w - 1) * per_peer && ok; i += 32) {
      const int q = comm::peer_at(r, 1 + i / per_peer, w), chunk = i % per_peer;
      if (chunk >= ar_chunks_of(s, q)) continue;
      ok = wait_with_key(pr, comm::flag_slot(pr, r, 1, q, chunk), q, 1, t.m, e);
    }
  }
  __syncwarp();
  if (lane == 0) close_call(pr, e);
}

}  // namespace

int ar_tail_grid(const ArSchedule& s, int rank, int64_t m, int block_m, int cap) {
  const int64_t rows = std::min<int64_t>(int64_t(ar_band_end(s, rank)) * block_m, m) - int64_t(ar_band_begin(s, rank)) * block_m;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(rows, std::max(1, cap))));
}

void launch_ar_tail(const ArTailParams& p, int grid, cudaStream_t stream) {
  ar_tail_kernel<<<grid, kTailThreads, 0, stream>>>(p);
  WEAVE_CHECK_LAUNCH();
}

}  // namespace weave::fused
