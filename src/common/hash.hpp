// A 64-bit finaliser (MurmurHash3's fmix64) for test values that must differ at every position
// and seed: self-test inputs, one-hot columns, the weights fingerprint (also in device code). Not
// for anything security-related.
#pragma once
#include <cstdint>

namespace weave {

#if defined(__CUDACC__)
__host__ __device__
#endif
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

}  // namespace weave
