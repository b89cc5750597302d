// Device building blocks shared by the lsa and ce kernels: bounded flag waits that record a
// diagnostic instead of hanging, publish/consume of flags (docs/memory_ordering.md), byte copies
// with 16-byte vectors where alignment allows, and rank-ordered fp32-accumulated reductions.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "comm/device_error.hpp"
#include "comm/kernels.hpp"
#include "comm/protocol.hpp"
#include "hopper/ptx/comm_flags.cuh"
#include "weave/window_handle.hpp"

namespace weave::comm {

// Testing hooks: this thread spins `ns` nanoseconds (0 costs one compare). The fused epilogues'
// slow rank (config delay_stores_ns) calls it from one leader thread.
__device__ __forceinline__ void delay_for_testing(uint64_t ns) {
  if (ns == 0) return;
  const uint64_t start = ptx::globaltimer_ns();
  while (ptx::globaltimer_ns() - start < ns) ptx::nanosleep(1000);
}

// comm::CollectiveHooks::receive_delay_ns: the whole CTA waits before receiving, as the negative
// controls need to expose buffer reuse (LL lines, ce staging). Every thread of the CTA must call it.
__device__ inline void testing_delay(uint64_t ns) {
  if (ns == 0) return;
  __syncthreads();
  if (threadIdx.x == 0) delay_for_testing(ns);
  __syncthreads();
}


__device__ __forceinline__ uint32_t* ctrl_word(const Proto& a, int idx) {
  return reinterpret_cast<uint32_t*>(a.win.base[a.win.rank] + a.control) + idx;
}
// My credit slot for peer `src` (written by src: its ready epoch).
__device__ __forceinline__ uint32_t* credit_slot(const Proto& a, int owner, int src) {
  return reinterpret_cast<uint32_t*>(a.win.base[owner] + a.credits) + src;
}
// Arrival flag [phase][src][block] in `owner`'s window.
__device__ __forceinline__ uint32_t* flag_slot(const Proto& a, int owner, int phase, int src, int block) {
  return reinterpret_cast<uint32_t*>(a.win.base[owner] + a.flags) +
         flag_index(phase, src, block, a.win.world, a.max_blocks);
}

__device__ __forceinline__ bool aborted(const Proto& a) {
  return ptx::ld_relaxed_sys_u32(ctrl_word(a, kCtrlAborted)) != 0;
}

// --- peer aborts (docs/memory_ordering.md "peer-abort") ---
// Whether peer q gave up this op (its abort word, read in q's own control region: q stores no
// more flags, so a wait for q would only time out). A remote load, made in a wait's slow path.
__device__ __forceinline__ bool peer_gave_up(const Proto& a, int q) {
  if (q < 0 || q == a.win.rank || a.win.base[q] == nullptr) return false;
  return ptx::ld_relaxed_sys_u32(reinterpret_cast<const uint32_t*>(a.win.base[q] + a.control) + kCtrlAborted) != 0;
}

// peer_gave_up: the wait ended early because `peer` had given up (peer_gave_up), not by its own
// timeout.
__device__ inline void record_timeout(const Proto& a, const uint32_t* flag, int peer, int phase,
                                      FlagKind kind, uint32_t expected, uint32_t seen, uint64_t waited,
                                      bool followed_peer = false) {
  // The claim is an atomic on the op's local control word (device memory): atomics on mapped
  // host memory are not atomic without host-native atomic support. The winner fills the record.
  if (atomicCAS(ctrl_word(a, kCtrlAborted), 0u, 1u) == 0u) {
    a.err->claimed = 1u;
    a.err->rank = a.win.rank;
    a.err->peer = peer;
    a.err->block = static_cast<int32_t>(blockIdx.x);
    a.err->phase = phase;
    a.err->flag_kind = static_cast<uint32_t>(kind);
    a.err->expected = expected;
    a.err->seen = seen;
    a.err->waited_ns = waited;
    a.err->flag_offset = static_cast<uint64_t>(reinterpret_cast<const char*>(flag) - a.win.base[a.win.rank]);
    a.err->followed_peer = followed_peer ? 1u : 0u;
    __threadfence_system();
    *reinterpret_cast<volatile uint32_t*>(&a.err->valid) = 1u;
    __threadfence_system();
  }
}

// --- zero-copy keys (docs/memory_ordering.md "zero-copy-offsets") ---
// Peer `src`'s {offset, stride} slot in `owner`'s control region (written by src).
__device__ __forceinline__ volatile uint64_t* zc_slot(const Proto& a, int owner, int src) {
  return reinterpret_cast<volatile uint64_t*>(a.win.base[owner] + a.control + kCtrlZeroCopy * 4) + 2 * src;
}

// Stores this rank's key into peer q's slot. The same thread's later release store of its ready /
// flag to q orders it ("publish-release"), so q reads it after acquiring that ready / flag.
__device__ __forceinline__ void publish_zc(const Proto& a, int q, const ZeroCopyKey& k) {
  if (!k.check) return;
  volatile uint64_t* s = zc_slot(a, q, a.win.rank);
  s[0] = k.offset;
  s[1] = k.stride;
}

// Claims the abort word (as a timed-out wait does) and fills the error record of a mismatch.
__device__ inline void record_mismatch(const Proto& a, int q, FlagKind kind, uint32_t epoch, uint64_t own_offset,
                                       uint64_t own_stride, uint64_t peer_offset, uint64_t peer_stride) {
  if (atomicCAS(ctrl_word(a, kCtrlAborted), 0u, 1u) == 0u) {
    a.err->claimed = 1u;
    a.err->rank = a.win.rank;
    a.err->peer = q;
    a.err->block = static_cast<int32_t>(blockIdx.x);
    a.err->phase = -1;
    a.err->flag_kind = static_cast<uint32_t>(kind);
    a.err->expected = epoch;
    a.err->own_offset = own_offset;
    a.err->own_stride = own_stride;
    a.err->peer_offset = peer_offset;
    a.err->peer_stride = peer_stride;
    __threadfence_system();
    *reinterpret_cast<volatile uint32_t*>(&a.err->valid) = 1u;
    __threadfence_system();
  }
}

// After the acquire of peer q's lag-0 ready / flag of THIS call (q cannot be in a later call
// before this rank signals this one), q's slot holds q's key of this call. A mismatch claims the
// abort word like a timeout and fills the record with both keys: every later wait and gated
// store of the op is skipped, and the host raises kMismatch.
__device__ inline bool zc_matches(const Proto& a, int q, const ZeroCopyKey& k) {
  if (!k.check) return true;
  const volatile uint64_t* s = zc_slot(a, a.win.rank, q);
  const uint64_t off = s[0], stride = s[1];
  if (off == k.offset && stride == k.stride) return true;
  record_mismatch(a, q, FlagKind::kZeroCopyOffset, 0u, k.offset, k.stride, off, stride);
  return false;
}

// --- call keys (docs/memory_ordering.md "call-key") ---
// A fused op's rows land where each rank's own m puts them, so ranks that disagree on m would
// store rows where a peer does not look. The key {e << 32 | m} (one u64: a single-copy-atomic
// store and load) rides on every flag and credit a fused op publishes: the publishing thread
// stores it into the receiver's slot [sender] right before its release store; the receiver
// compares it right after its acquire. A key of another call (a peer already in its next call)
// or an unwritten slot (m = 0) is not compared.
__device__ __forceinline__ volatile uint64_t* call_key_slot(const Proto& a, int owner, int src) {
  return reinterpret_cast<volatile uint64_t*>(a.win.base[owner] + a.control + kCtrlCallKey * 4) + src;
}
__device__ __forceinline__ void publish_call_key(const Proto& a, int q, int64_t m, uint32_t e) {
  *call_key_slot(a, q, a.win.rank) = (static_cast<uint64_t>(e) << 32) | static_cast<uint32_t>(m);
}
// After the acquire of peer q's flag or credit of call e. A mismatch claims the abort word like a
// timed-out wait (every later wait and peer store of the op is skipped) and the host raises
// kMismatch naming both m.
__device__ inline bool call_key_agrees(const Proto& a, int q, int64_t m, uint32_t e) {
  const uint64_t seen = *call_key_slot(a, a.win.rank, q);
  const uint32_t seen_m = static_cast<uint32_t>(seen), seen_e = static_cast<uint32_t>(seen >> 32);
  if (seen_e != e || seen_m == 0u || seen_m == static_cast<uint32_t>(m)) return true;
  record_mismatch(a, q, FlagKind::kCallRows, e, static_cast<uint64_t>(m), 0u, seen_m, 0u);
  return false;
}

// docs/memory_ordering.md "bounded-wait".
// Spins (acquire loads, docs/memory_ordering.md "consume-acquire") until *flag has reached
// `expected` (wrap-safe). Bounded: after timeout_ns (or once the awaited peer gave up the op) it
// records the diagnostic and returns false; when another thread of this op already gave up it
// returns false at once, recording nothing (the first record stands); the caller then leaves.
// give_up() (every 128 polls, before the clock) may end the wait early having recorded why (a
// fused op's call key of another m, "call-key"); the default never does.
struct NeverGiveUp {
  __device__ __forceinline__ bool operator()() const { return false; }
};
template <class GiveUp = NeverGiveUp>
__device__ inline bool wait_reached(const Proto& a, const uint32_t* flag, uint32_t expected, int peer,
                                    int phase, FlagKind kind, GiveUp give_up = {}) {
  uint32_t seen = ptx::ld_acquire_sys_u32(flag);
  if (epoch_reached(seen, expected)) return true;
  const uint64_t start = ptx::globaltimer_ns();
  for (uint32_t it = 1;; ++it) {
    seen = ptx::ld_acquire_sys_u32(flag);
    if (epoch_reached(seen, expected)) return true;
    if ((it & 127u) == 0) {
      if (aborted(a) || give_up()) return false;
      const uint64_t waited = ptx::globaltimer_ns() - start;
      // One record site for both endings (a second one made the fused all-reduce kernels spill).
      const bool followed = peer_gave_up(a, peer);
      if (followed || waited > a.timeout_ns) {
        record_timeout(a, flag, peer, phase, kind, expected, seen, waited, followed);
        return false;
      }
      if (it > 4096u) ptx::nanosleep(64);
    }
  }
}

// Publishes `epoch` into a flag in a peer's window: release (docs/memory_ordering.md
// "publish-release"). The caller has ordered the data stores before it with __syncthreads().
__device__ __forceinline__ void publish(uint32_t* flag, uint32_t epoch) { ptx::st_release_sys_u32(flag, epoch); }

// --- copies ---
template <typename V>
__device__ __forceinline__ void copy_units(V* __restrict__ dst, const V* __restrict__ src, size_t n, int tid, int nth) {
  size_t i = static_cast<size_t>(tid);
  const size_t step = static_cast<size_t>(nth);
  for (; i + 3 * step < n; i += 4 * step) {
    const V a = src[i], b = src[i + step], c = src[i + 2 * step], d = src[i + 3 * step];
    dst[i] = a;
    dst[i + step] = b;
    dst[i + 2 * step] = c;
    dst[i + 3 * step] = d;
  }
  for (; i < n; i += step) dst[i] = src[i];
}

// Copies n bytes with the widest unit both addresses allow after a common head: 16 bytes when
// src and dst agree modulo 16 (the usual case), down to single bytes for odd relative offsets.
// All threads of [0, nth) must call it with the same arguments.
static __device__ __noinline__ void copy_bytes(char* dst, const char* src, size_t n, int tid, int nth) {
  if (n == 0) return;
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  size_t w = 16;
  while (w > 1 && ((d ^ s) & (w - 1))) w >>= 1;
  size_t head = (w - (d & (w - 1))) & (w - 1);
  if (head > n) head = n;
  for (size_t i = tid; i < head; i += nth) dst[i] = src[i];
  const size_t units = (n - head) / w;
  char* db = dst + head;
  const char* sb = src + head;
  switch (w) {
    case 16: copy_units(reinterpret_cast<int4*>(db), reinterpret_cast<const int4*>(sb), units, tid, nth); break;
    case 8: copy_units(reinterpret_cast<int2*>(db), reinterpret_cast<const int2*>(sb), units, tid, nth); break;
    case 4: copy_units(reinterpret_cast<int*>(db), reinterpret_cast<const int*>(sb), units, tid, nth); break;
    case 2: copy_units(reinterpret_cast<short*>(db), reinterpret_cast<const short*>(sb), units, tid, nth); break;
    default: copy_units(db, sb, units, tid, nth); break;
  }
  const size_t done = head + units * w;
  for (size_t i = done + tid; i < n; i += nth) dst[i] = src[i];
}

// --- reductions: fp32 accumulation in rank order 0..nsrc-1 (bitwise identical on every rank) ---
template <typename T> struct Elem;
template <> struct Elem<float> {
  static constexpr int kPerVec = 4;
  __device__ static float load(const float* p) { return *p; }
  __device__ static void store(float* p, float v) { *p = v; }
  __device__ static void unpack(const int4& v, float* f) {
    f[0] = __int_as_float(v.x); f[1] = __int_as_float(v.y); f[2] = __int_as_float(v.z); f[3] = __int_as_float(v.w);
  }
  __device__ static int4 pack(const float* f) {
    return make_int4(__float_as_int(f[0]), __float_as_int(f[1]), __float_as_int(f[2]), __float_as_int(f[3]));
  }
};
template <> struct Elem<__nv_bfloat16> {
  static constexpr int kPerVec = 8;
  __device__ static float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
  __device__ static void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
  __device__ static void unpack(const int4& v, float* f) {
    const uint32_t w[4] = {static_cast<uint32_t>(v.x), static_cast<uint32_t>(v.y), static_cast<uint32_t>(v.z),
                           static_cast<uint32_t>(v.w)};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  }
  __device__ static int4 pack(const float* f) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i]));
      const uint32_t hi = __bfloat16_as_ushort(__float2bfloat16_rn(f[2 * i + 1]));
      w[i] = lo | (hi << 16);
    }
    return make_int4(static_cast<int>(w[0]), static_cast<int>(w[1]), static_cast<int>(w[2]), static_cast<int>(w[3]));
  }
};

// out_d[i] = sum_{s in 0..nsrc-1} src_s[i] for i in [begin, end), written to every one of the
// ndst destinations (local output and/or peers' windows). W (>= nsrc) sizes the pointer arrays at
// compile time: the kernels are instantiated for W = 2, 4, 8 so a 2-rank run does not pay the
// registers of 8 (dispatch_world in lsa_kernels.cu). Vectorised when every pointer is
// 16-byte aligned at `begin`; scalar otherwise (odd offsets of caller buffers).
template <typename T, int W>
__device__ inline void reduce_range(const T* const (&src)[W], int nsrc, T* const (&dst)[W + 1],
                                    int ndst, size_t begin, size_t end, int tid, int nth) {
  if (begin >= end) return;
  constexpr int kV = Elem<T>::kPerVec;
  bool aligned = true;
#pragma unroll
  for (int s = 0; s < W; ++s)
    if (s < nsrc) aligned &= (reinterpret_cast<uintptr_t>(src[s] + begin) & 15u) == 0;
#pragma unroll
  for (int d = 0; d < W + 1; ++d)
    if (d < ndst) aligned &= (reinterpret_cast<uintptr_t>(dst[d] + begin) & 15u) == 0;
  size_t i = begin;
  if (aligned) {
    const size_t nvec = (end - begin) / kV;
    for (size_t v = tid; v < nvec; v += nth) {
      const size_t e = begin + v * kV;
      float acc[kV];
      {
        const int4 x = *reinterpret_cast<const int4*>(src[0] + e);
        Elem<T>::unpack(x, acc);
      }
#pragma unroll
      for (int s = 1; s < W; ++s) {
        if (s < nsrc) {
          float f[kV];
          const int4 x = *reinterpret_cast<const int4*>(src[s] + e);
          Elem<T>::unpack(x, f);
#pragma unroll
          for (int k = 0; k < kV; ++k) acc[k] += f[k];
        }
      }
      const int4 packed = Elem<T>::pack(acc);
#pragma unroll
      for (int d = 0; d < W + 1; ++d)
        if (d < ndst) *reinterpret_cast<int4*>(dst[d] + e) = packed;
    }
    i = begin + nvec * kV;
  }
  for (size_t e = i + tid; e < end; e += nth) {
    float acc = Elem<T>::load(src[0] + e);
#pragma unroll
    for (int s = 1; s < W; ++s)
      if (s < nsrc) acc += Elem<T>::load(src[s] + e);
#pragma unroll
    for (int d = 0; d < W + 1; ++d)
      if (d < ndst) Elem<T>::store(dst[d] + e, acc);
  }
}

// Calls f(std::integral_constant<int, W>{}) with the smallest W in {2, 4, 8} that holds `world`
// ranks (world 1 uses W = 2): the compile-time array size of the reduction kernels.
template <typename F>
void dispatch_world(int world, F&& f) {
  if (world <= 2) f(std::integral_constant<int, 2>{});
  else if (world <= 4) f(std::integral_constant<int, 4>{});
  else f(std::integral_constant<int, 8>{});
}

}  // namespace weave::comm
