// The low-latency (LL) line, shared by the LL collective (ll_kernels.cu) and the decode GEMV's
// all-reduce epilogue (gemv/gemv_all_reduce.cuh): a 16-byte line {d0, f, d1, f ^ P} carries 8
// payload bytes; each 8-byte half {data, flag} lands whole, so a receiver that sees the call's flag
// in both halves holds that call's data, with no fence on the sender and no separate flag
// (docs/memory_ordering.md "ll-flag-in-data"; P, the payload's byte count, makes ranks that
// disagree on it a mismatch, not a misread).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "comm/device_common.cuh"

namespace weave::comm {

struct LlUnit {  // 8 payload bytes
  uint32_t lo = 0, hi = 0;
};

// f: the call's flag; f2 = f ^ the payload's byte count (each 8-byte half self-validating with the
// epoch, the second also carrying the count: ranks that disagree on it are found, not misread).
__device__ __forceinline__ void ll_send_line(char* line, LlUnit u, uint32_t f, uint32_t f2) {
  ptx::st_volatile_v4_u32(line, u.lo, f, u.hi, f2);
}

// docs/memory_ordering.md "bounded-wait", for LL lines: polls until the halves carry {f, f2}. On
// timeout (or when another thread already timed out) records the diagnostic and returns false. A
// line of this call (first half f) whose second half stays another f ^ P' over two checks 1024
// polls apart (a torn read of the two 8-byte halves lasts nanoseconds) is the peer's call moving
// P' bytes, not this rank's P: a mismatch naming both, recorded at once.
__device__ inline bool ll_receive_line(const Proto& p, const char* line, uint32_t f, uint32_t f2, int src, LlUnit* out) {
  uint4 v = ptx::ld_volatile_v4_u32(line);
  if (v.y == f && v.w == f2) {
    out->lo = v.x;
    out->hi = v.z;
    return true;
  }
  const uint64_t start = ptx::globaltimer_ns();
  bool other_count = false;
  for (uint32_t it = 1;; ++it) {
    v = ptx::ld_volatile_v4_u32(line);
    if (v.y == f && v.w == f2) {
      out->lo = v.x;
      out->hi = v.z;
      return true;
    }
    if ((it & 1023u) == 0) {
      if (aborted(p)) return false;
      if (v.y == f && v.w != f2) {
        if (other_count) {
          record_mismatch(p, src, FlagKind::kLineBytes, f, f2 ^ f, 0u, v.w ^ f, 0u);
          return false;
        }
        other_count = true;
      } else {
        other_count = false;
      }
      const uint64_t waited = ptx::globaltimer_ns() - start;
      if (waited > p.timeout_ns) {
        const uint32_t seen = v.y != f ? v.y : v.w;
        record_timeout(p, reinterpret_cast<const uint32_t*>(line + 4), src, 0, FlagKind::kLine, f, seen, waited);
        return false;
      }
    }
  }
}

// Element-wise view of one unit (bf16 x 4 or fp32 x 2) for the reductions.
template <typename T>
struct LlUnitElems {
  static constexpr int kN = static_cast<int>(kLLPayloadBytes / sizeof(T));
  __device__ static void unpack(const LlUnit& u, float* v) {
    if constexpr (sizeof(T) == 4) {
      v[0] = __uint_as_float(u.lo);
      v[1] = __uint_as_float(u.hi);
    } else {
      v[0] = __uint_as_float(u.lo << 16);
      v[1] = __uint_as_float(u.lo & 0xFFFF0000u);
      v[2] = __uint_as_float(u.hi << 16);
      v[3] = __uint_as_float(u.hi & 0xFFFF0000u);
    }
  }
  __device__ static LlUnit pack(const float* acc) {
    LlUnit u;
    if constexpr (sizeof(T) == 4) {
      u.lo = __float_as_uint(acc[0]);
      u.hi = __float_as_uint(acc[1]);
    } else {
      auto b = [](float x) { return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(x))); };
      u.lo = b(acc[0]) | (b(acc[1]) << 16);
      u.hi = b(acc[2]) | (b(acc[3]) << 16);
    }
    return u;
  }
};

}  // namespace weave::comm
