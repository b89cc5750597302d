// Known per-rank values for the collective tests and `weave bench comm`, hashed from
// (source rank, index, seed) so misplaced, missing or stale data shows. (They were linear forms,
// ((7j + 5 src + 3 seed) % 9) - 4: period 9 along j, so data read a multiple of 9 elements off
// looked right, and period 3 in the seed, so seeds s and s + 3 gave identical inputs.)
// Host and device.
#pragma once
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define WEAVE_COMM_VALUES_HD __host__ __device__ inline
#else
#define WEAVE_COMM_VALUES_HD inline
#endif

namespace weave::bench {

// Any byte (all-gather payloads).
WEAVE_COMM_VALUES_HD uint8_t comm_test_byte(int src, size_t j, uint32_t seed) {
  uint32_t x = static_cast<uint32_t>(src + 1) * 0x9E3779B1u ^ static_cast<uint32_t>(j) * 0x85EBCA77u ^
               static_cast<uint32_t>(static_cast<uint64_t>(j) >> 32) ^ seed * 0xC2B2AE3Du;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return static_cast<uint8_t>(x);
}

// Integers in [-4, 4]: sums over 8 ranks stay exact in bf16 (reductions).
WEAVE_COMM_VALUES_HD float comm_test_int(int src, size_t j, uint32_t seed) {
  uint32_t x = static_cast<uint32_t>(src + 1) * 0x27D4EB2Fu ^ static_cast<uint32_t>(j) * 0x9E3779B1u ^
               static_cast<uint32_t>(static_cast<uint64_t>(j) >> 32) * 0x85EBCA77u ^ (seed + 0x165667B1u) * 0xC2B2AE3Du;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  x *= 0x297A2D39u;
  x ^= x >> 15;
  return static_cast<float>(static_cast<int>(x % 9u) - 4);
}

}  // namespace weave::bench
