// The decode GEMV's all-reduce epilogue (gemv/gemv_all_reduce.hpp says what it computes): the
// GEMV body of gemv_kernel.cuh with this epilogue instead of the store.
//   after_wait  thread 0 reads the abort word and the epoch and takes the CTA's election ticket
//               (call_protocol.cuh read_call_epoch; shared words read after the staging barrier)
//   reduce      every thread: its units of the band, rounded to bf16 (kept in registers) and sent
//               as LL lines to every peer, from the landing region at one token tile (the pushed
//               reduction), else while the cluster's partials are readable
//   finish      every thread: polls its units' lines from every peer, sums in rank order, stores;
//               the last ticket stores the epoch
// Sends precede every wait of the call (a CTA that gives up has written all it will write); a
// call of an aborted op sends, waits for and stores nothing.
#pragma once
#include "comm/call_protocol.cuh"
#include "comm/ll_line.cuh"
#include "gemv/gemv_all_reduce.hpp"
#include "gemv/gemv_kernel.cuh"

namespace weave::detail::gemv {

// The call's epoch and abort word as thread 0 read them, for the whole CTA.
__device__ __forceinline__ uint32_t* all_reduce_call_words() {
  __shared__ uint32_t words[2];
  return words;
}

template <ScaleMode kMode, int kTiles>
struct GemvAllReduceEpilogue {
  // Its CTAs' row shares are whole LL units (4 rows): the pushed reduction lands them so.
  static constexpr int kRowGranule = kRowsPerCta / kGemvLlUnitsPerBand;
  // One token tile pushes the cluster reduction (gemv_params.hpp pushes_reduction); wider tiles pull.
  static constexpr bool kPushed = pushes_reduction(WeightPath::kRegisters, kTiles);
  // Units per thread: at most kGemvMaxM tokens x 32 units (a cluster of one CTA) over kThreads.
  static constexpr int kMaxItems = kGemvMaxM * kGemvLlUnitsPerBand / kThreads;
  static_assert(kMaxItems * kThreads == kGemvMaxM * kGemvLlUnitsPerBand);

  const GemvAllReduce& ar;
  comm::CallEpoch call;
  comm::LlUnit own[kMaxItems];  // this rank's partials of the thread's units
  uint32_t f = 0, f2 = 0, slot = 0;
  bool bad = false;
  int u_begin = 0, u_count = 0, items = 0;

  // Line (token, band, unit) from `src` in `owner`'s window (n_blocks = gridDim.y bands).
  __device__ __forceinline__ char* line(int owner, int src, int tok, int band, int unit) const {
    return ar.p.win.base[owner] + ar.ll + (static_cast<uint64_t>(slot) * ar.p.win.world + src) * ar.source_bytes +
           ((static_cast<uint64_t>(tok) * gridDim.y + band) * kGemvLlUnitsPerBand + unit) * comm::kLLLineBytes;
  }

  // The landing wait's negative control (GemvAllReduce::skip_push_rank): that cluster rank's CTAs
  // push nothing, so their peers' landing waits give up.
  __device__ __forceinline__ bool skips_push(int rank) const { return rank == ar.skip_push_rank; }

  __device__ __forceinline__ void after_wait() {
    if (threadIdx.x == 0) {
      bool gave_up = false;
      all_reduce_call_words()[0] = comm::read_call_epoch(ar.p, gridDim.x * gridDim.y, &gave_up, &call);
      all_reduce_call_words()[1] = gave_up ? 1u : 0u;
    }
  }

  template <ScaleMode, int kTokens>
  __device__ __forceinline__ void reduce(const KernelParams& p, cooperative_groups::cluster_group& cluster,
                                         const GemvBand& b) {
    call.e = all_reduce_call_words()[0];  // stored before the staging barrier
    // A gave-up epoch wait, or a landing wait that gave up (no rows, recorded): send nothing, so
    // every peer's bounded wait for this CTA's lines names this rank instead of summing garbage.
    bad = all_reduce_call_words()[1] != 0 || (kPushed && b.landed == nullptr);
    f = comm::ll_flag(call.e);
    f2 = f ^ ar.payload_bytes;
    slot = comm::slot_of(call.e, ar.slots);
    // Cluster rank c takes units [c 32 / split, (c + 1) 32 / split) of every token.
    u_begin = b.rank * kGemvLlUnitsPerBand / b.split;
    u_count = (b.rank + 1) * kGemvLlUnitsPerBand / b.split - u_begin;
    items = p.m * u_count;
    comm::testing_delay(bad ? 0 : ar.delay_sends_ns);
    const int w = ar.p.win.world, r = ar.p.win.rank;
#pragma unroll
    for (int j = 0; j < kMaxItems; ++j) {
      const int idx = static_cast<int>(threadIdx.x) + j * kThreads;
      if (idx < items && !(kPushed && bad)) {  // (no landed rows to read after a landing give-up)
        const int tok = idx / u_count, unit = u_begin + idx % u_count;
        float v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e)
          v[e] = kPushed ? landed_row<kMode, kTokens>(b, tok, 4 * unit + e)
                         : reduced_row<kMode, kTokens>(cluster, b, tok, 4 * unit + e);
        own[j] = comm::LlUnitElems<__nv_bfloat16>::pack(v);  // round to nearest, as the GEMV's store
        if (!bad)
          for (int s = 1; s < w; ++s)
            comm::ll_send_line(line(comm::peer_at(r, s, w), r, tok, b.band, unit), own[j], f, f2);
      }
    }
  }

  __device__ __forceinline__ void finish(const KernelParams& p, const GemvBand& b) {
    comm::testing_delay(bad ? 0 : ar.delay_receive_ns);
    const int w = ar.p.win.world, r = ar.p.win.rank;
    bool ok = !bad;
#pragma unroll
    for (int j = 0; j < kMaxItems; ++j) {
      const int idx = static_cast<int>(threadIdx.x) + j * kThreads;
      if (ok && idx < items) {
        const int tok = idx / u_count, unit = u_begin + idx % u_count;
        // fp32 sum in rank order 0..w-1 from rank 0's value, as the LL all-reduce (ll_kernels.cu).
        float acc[4], v[4];
        for (int q = 0; q < w && ok; ++q) {
          comm::LlUnit got;
          if (q == r) {
            got = own[j];
          } else if (ar.no_wait) {
            const uint4 x = weave::ptx::ld_volatile_v4_u32(line(r, q, tok, b.band, unit));
            got.lo = x.x;
            got.hi = x.z;
          } else {
            ok = comm::ll_receive_line(ar.p, line(r, q, tok, b.band, unit), f, f2, q, &got);
          }
          comm::LlUnitElems<__nv_bfloat16>::unpack(got, v);
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[e] = q == 0 ? v[e] : acc[e] + v[e];
        }
        const int n0 = b.band * kRowsPerCta + 4 * unit;
        if (ok && n0 < p.n) {  // N is a multiple of 4 (gemv_all_reduce_launch): the unit is whole
          const comm::LlUnit sum = comm::LlUnitElems<__nv_bfloat16>::pack(acc);
          *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.c) + tok * p.ldc + n0) = make_uint2(sum.lo, sum.hi);
        }
      }
    }
    if (__syncthreads_or(!ok)) return;
    comm::end_call(ar.p, call, gridDim.x * gridDim.y);
  }
};

template <ScaleMode kMode, int kTiles>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_all_reduce_kernel(const KernelParams p, const __grid_constant__ CUtensorMap b_map,
                           const __grid_constant__ GemvAllReduce ar) {
  GemvAllReduceEpilogue<kMode, kTiles> epi{ar};
  gemv_body<kMode, kTiles, WeightPath::kRegisters, 0>(p, b_map, epi);
}

}  // namespace weave::detail::gemv
