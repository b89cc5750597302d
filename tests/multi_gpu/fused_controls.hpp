// What the fused operators' negative controls over NCCL share (test_fused_controls_*.cu): the
// quiet outputs a controlled call is held to, and a snapshot of an output taken on the stream
// right after a call (before any later peer store can mend it). A control builds the op with one
// mechanism switched off through its internal testing hooks (fused_op_world.hpp make_with_hooks),
// slows one rank so the mechanism matters, and must count wrong elements; the same run with the
// mechanism on must count none.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/timeout.hpp"
#include "comm_support.hpp"
#include "common/check.hpp"
#include "fused_calls.hpp"
#include "fused_op_world.hpp"
#include "testing/reduce_reference.hpp"

namespace weave::test {

// split-lsa's quiet output of a call per entry of `ms` (fresh random A of `seed`), each held to the
// NCCL-made reference: what the controlled op must give for the same inputs (its mechanisms on,
// every mode these controls run is bitwise equal to split-lsa).
template <class T>
std::vector<QuietCall> split_lsa_calls(Communicator& c, int64_t n, int64_t k, const std::vector<int64_t>& ms,
                                       const bench::DeviceOperand& b, uint64_t seed, cudaStream_t st) {
  auto split = T::make(c, T::config(T::kSplitLsa, n, k, *std::max_element(ms.begin(), ms.end())));
  return quiet_calls<T>(c, *split, *split, ms, n, k, b, seed, st, std::string(T::kName) + " control's split-lsa");
}

// Copies `op`'s output of m rows into `snap` (allocated before the call: an allocation may wait for
// the device), enqueued on `st` now, right after the call it follows.
template <class T>
void snapshot_now(const typename T::Op& op, int64_t m, const bench::DeviceBuffer& snap, cudaStream_t st) {
  WEAVE_CHECK_CUDA(cudaMemcpyAsync(snap.get(), op.output(m).data, snap.bytes(), cudaMemcpyDeviceToDevice, st));
}

// Elements of `out` (a snapshot or the op's output; bf16, the call's rows) that differ from the
// call's quiet output; synchronises `st`.
inline int64_t count_wrong(const void* out, const QuietCall& call, cudaStream_t st) {
  return bench::gpu_count_differing(out, call.want.get(), call.want.bytes() / 2, DType::kBF16, st);
}

}  // namespace weave::test
