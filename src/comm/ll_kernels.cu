// lsa low-latency (LL) protocol: one kernel per call, no fence and no separate flag.
//
//   rank r, call e, thread g of G (8-byte payload units u = g, g + G, ...):
//     send:    for each peer q: line {d0, f, d1, f ^ P} of my payload for q, unit u
//              -> q.ll[slot(e)][r][u]    (f = ll_flag(e), P = payload bytes per peer; one v4 store)
//     receive: for each source q != r: poll my ll[slot(e)][q][u] until the flags are {f, f ^ P}
//              (a peer's line of this call with another P: a mismatch, "ll-flag-in-data")
//              -> all-gather: out[q][u]; reductions: sum units of rank 0..w-1 in fp32 -> out[u]
//     end:     last CTA stores the epoch (call_protocol.cuh end_call)
// docs/memory_ordering.md "ll-flag-in-data" says why no fence is needed, and "ll-reuse" why two
// copies per source and no credit keep a rank that is a call ahead from overwriting lines a peer
// still reads. Sending before receiving in every thread means no CTA waits for a CTA of its own
// grid. Payloads of any byte count and caller buffers of any alignment: a unit is assembled
// byte by byte unless it is whole and 8-byte aligned.
#include <cuda_bf16.h>

#include "comm/call_protocol.cuh"
#include "comm/ll_line.cuh"
#include "comm/kernels.hpp"
#include "comm/op_layout.hpp"
#include "common/check.hpp"

namespace weave::comm {

namespace {

// Up to 8 bytes at p (n in 1..8).
__device__ __forceinline__ LlUnit load_unit(const char* p, size_t n) {
  LlUnit u;
  if (n == kLLPayloadBytes && (reinterpret_cast<uintptr_t>(p) & 7u) == 0) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    u.lo = v.x;
    u.hi = v.y;
    return u;
  }
  uint64_t x = 0;
  for (size_t i = 0; i < n; ++i) x |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  u.lo = static_cast<uint32_t>(x);
  u.hi = static_cast<uint32_t>(x >> 32);
  return u;
}

__device__ __forceinline__ void store_unit(char* p, size_t n, LlUnit u) {
  if (n == kLLPayloadBytes && (reinterpret_cast<uintptr_t>(p) & 7u) == 0) {
    *reinterpret_cast<uint2*>(p) = make_uint2(u.lo, u.hi);
    return;
  }
  const uint64_t x = static_cast<uint64_t>(u.lo) | (static_cast<uint64_t>(u.hi) << 32);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>(x >> (8 * i));
}

__device__ __forceinline__ char* ll_line(const LlCall& c, int owner, uint32_t slot, int src, size_t unit) {
  return c.p.win.base[owner] + c.ll + (static_cast<uint64_t>(slot) * c.p.win.world + src) * c.ll_stride +
         unit * kLLLineBytes;
}

template <CollectiveOp kOp, typename T>
__global__ void __launch_bounds__(kLsaThreads, 1) ll_kernel(const LlCall c) {
  const Proto& p = c.p;
  const int w = p.win.world, r = p.win.rank;
  const size_t esz = kOp == CollectiveOp::kAllGather ? 1 : sizeof(T);
  const size_t payload = c.count * esz;  // per peer
  const size_t units = ll_lines(payload);
  // One unit per thread per iteration and as many CTAs as units / threads (ll_blocks_for):
  // measured faster than several units per thread in fewer CTAs (docs/perf/comm.md).
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  auto bytes_at = [&](size_t u) {
    const size_t off = u * kLLPayloadBytes;
    return payload - off < kLLPayloadBytes ? payload - off : kLLPayloadBytes;
  };
  // What this rank sends to peer q (reduce-scatter: q's block; otherwise the whole input).
  auto payload_for = [&](int q) { return kOp == CollectiveOp::kReduceScatter ? c.in + q * payload : c.in; };
  // all-gather / all-reduce send one unit to every peer: the thread's first unit is loaded while
  // the epoch is (begin_call's prefetch), which takes one memory latency off the call. It is
  // loaded once and never overwritten, so the receive loop reuses it for this rank's own share.
  LlUnit first_unit;
  CallEpoch call;
  const bool ok_begin = begin_call(p, &call, [&] {
    if (kOp != CollectiveOp::kReduceScatter && first < units)
      first_unit = load_unit(c.in + first * kLLPayloadBytes, bytes_at(first));
  });
  if (!ok_begin) return;
  const uint32_t e = call.e;
  const uint32_t f = ll_flag(e);
  const uint32_t f2 = f ^ static_cast<uint32_t>(payload);  // payload <= ll_max_count: never 0 or >= 2^32
  const uint32_t slot = slot_of(e, c.slots);

  for (size_t u = first; u < units; u += step) {
    const size_t off = u * kLLPayloadBytes;
    const size_t n = bytes_at(u);
    if constexpr (kOp == CollectiveOp::kReduceScatter) {
      for (int s = 1; s < w; ++s) {
        const int q = peer_at(r, s, w);
        ll_send_line(ll_line(c, q, slot, r, u), load_unit(payload_for(q) + off, n), f, f2);
      }
    } else {
      const LlUnit mine = u == first ? first_unit : load_unit(c.in + off, n);
      for (int s = 1; s < w; ++s) ll_send_line(ll_line(c, peer_at(r, s, w), slot, r, u), mine, f, f2);
    }
  }
  testing_delay(c.receive_delay_ns);

  bool ok = true;
  for (size_t u = first; u < units && ok; u += step) {
    const size_t off = u * kLLPayloadBytes;
    const size_t n = bytes_at(u);
    if constexpr (kOp == CollectiveOp::kAllGather) {
      if (!c.in_place) store_unit(c.out + r * payload + off, n, u == first ? first_unit : load_unit(c.in + off, n));
      for (int s = 1; s < w && ok; ++s) {
        const int q = source_at(r, s, w);
        LlUnit got;
        ok = ll_receive_line(c.p, ll_line(c, r, slot, q, u), f, f2, q, &got);
        if (ok) store_unit(c.out + q * payload + off, n, got);
      }
    } else {
      // fp32 sum in rank order 0..w-1, starting from rank 0's value as reduce_range does
      // (bitwise identical on every rank and to the other lsa paths); tail elements beyond
      // `payload` are summed as garbage and never stored.
      constexpr int kN = LlUnitElems<T>::kN;
      float acc[kN], v[kN];
      for (int q = 0; q < w && ok; ++q) {
        LlUnit got;
        if (q == r) got = kOp == CollectiveOp::kAllReduce && u == first ? first_unit : load_unit(payload_for(r) + off, n);
        else ok = ll_receive_line(c.p, ll_line(c, r, slot, q, u), f, f2, q, &got);
        LlUnitElems<T>::unpack(got, v);
#pragma unroll
        for (int k = 0; k < kN; ++k) acc[k] = q == 0 ? v[k] : acc[k] + v[k];
      }
      if (ok) store_unit(c.out + off, n, LlUnitElems<T>::pack(acc));
    }
  }
  if (__syncthreads_or(!ok)) return;
  end_call(p, call);
}

}  // namespace

void launch_lsa_ll(const LlCall& c, CollectiveOp op, DType dtype, cudaStream_t stream) {
  auto go = [&](auto kernel) { launch_lsa_kernel(kernel, c, stream); };
  const bool bf16 = dtype == DType::kBF16;
  switch (op) {
    case CollectiveOp::kAllGather: go(ll_kernel<CollectiveOp::kAllGather, uint8_t>); return;
    case CollectiveOp::kReduceScatter:
      if (bf16) go(ll_kernel<CollectiveOp::kReduceScatter, __nv_bfloat16>);
      else go(ll_kernel<CollectiveOp::kReduceScatter, float>);
      return;
    case CollectiveOp::kAllReduce:
      if (bf16) go(ll_kernel<CollectiveOp::kAllReduce, __nv_bfloat16>);
      else go(ll_kernel<CollectiveOp::kAllReduce, float>);
      return;
  }
}

int ll_blocks_for(size_t payload_bytes, int max_blocks) {
  const size_t want =
      ceil_div(ll_lines(payload_bytes == 0 ? 1 : payload_bytes), static_cast<size_t>(kLsaThreads));
  return static_cast<int>(want < 1 ? 1 : (want > static_cast<size_t>(max_blocks) ? max_blocks : want));
}

}  // namespace weave::comm
