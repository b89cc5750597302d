// Shared pieces of the multi-GPU communication tests: one set of communicators for the whole test
// process (one rank per visible Hopper GPU, up to 8; created on first use, destroyed at the end;
// a second set with a short timeout for the tests of a peer that never arrives),
// per-rank threads, a spin-delay kernel for "slow rank" tests, and device buffers.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "support/gpu.hpp"
#include "weave/collectives.hpp"
#include "weave/communicator.hpp"

namespace weave::test {

// The process-wide communicators (world = number of Hopper GPUs, capped at 8).
const std::vector<std::unique_ptr<Communicator>>& local_comms();
int local_world();
// run_per_rank over local_comms().
void for_each_rank(const std::function<void(Communicator&)>& fn);
// The same ranks over a second set of communicators whose bounded waits give up after
// kShortTimeoutS (created on first use): tests of a peer that never arrives wait that long per
// case instead of the default 10 s.
inline constexpr double kShortTimeoutS = 3;
void for_each_rank_short_timeout(const std::function<void(Communicator&)>& fn);

// Enqueues a kernel that spins for `ns` nanoseconds (a deliberately slow rank).
void spin_delay(uint64_t ns, cudaStream_t stream);

struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n);
  ~DevBuf();
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <typename T = char> T* as() const { return static_cast<T*>(p); }
};

struct StreamHolder {
  cudaStream_t s = nullptr;
  StreamHolder();
  ~StreamHolder();
};

// Deterministic test values. Bytes for all-gather: distinct per (source rank, index, call).
uint8_t byte_value(int src, size_t i, uint32_t call);
// Small integers (exact sums in bf16 and fp32): value of source `src`, element i, call `call`.
float small_value(int src, size_t i, uint32_t call);
// A config of the fields every test sets; tests set testing hooks on the result.
CollectiveConfig collective_config(CollectiveOp op, Transport t, Algorithm a, DType d, size_t max_count);

// Element size and per-rank input / output element counts of one call of `count` (the counting
// convention of Collective::run: all-gather bytes per rank, reduce-scatter output elements).
struct CallSizes {
  size_t esz = 1, in_elems = 0, out_elems = 0;
  size_t in_bytes() const { return in_elems * esz; }
  size_t out_bytes() const { return out_elems * esz; }
};
CallSizes call_sizes(CollectiveOp op, DType d, int world, size_t count);

// Input of `rank` for call `variant`: `elems` elements of the op's type (all-gather: bytes;
// reductions: small_value in bf16 or fp32).
void encode_input(std::vector<uint8_t>& dst, CollectiveOp op, DType d, int rank, size_t elems, uint32_t variant);
// What rank `rank`'s output must hold after a call where every rank passed encode_input(variant):
// computed on the CPU from the value functions, not from the code under test.
std::vector<uint8_t> expected_output(CollectiveOp op, DType d, int rank, int world, size_t count, uint32_t variant);

}  // namespace weave::test
