// Stream memory operations (CUDA driver cuStreamWaitValue32 / cuStreamWriteValue32), the means by
// which a kernel triggers copy-engine work: a copy stream waits for a word that a kernel stores,
// then copies (docs/memory_ordering.md "ce-device-trigger"). Entry points are fetched at run time
// (no libcuda link). Used only on words a kernel of the same op always writes, so a wait never
// depends on a peer (the rule that every wait on a peer is bounded holds).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace weave::comm {

class Group;

class StreamMemOps {
 public:
  // "" when `device` supports them (and the driver exports them), else why not.
  static std::string unsupported_reason(int device);
  // Loads the entry points; throws Error(kUnavailable) with unsupported_reason().
  explicit StreamMemOps(int device);
  // Collective: every rank of `g` checks its device, the ranks agree (one rank without them fails
  // every rank's construction with its reason, so none is left waiting in a first call), then
  // the entry points are loaded. `what` names the op in the error.
  static std::unique_ptr<StreamMemOps> agreed(const Group& g, std::string_view what);
  // Enqueues "wait until *word == value" on `stream`.
  void wait_eq(cudaStream_t stream, const uint32_t* word, uint32_t value) const;
  // Enqueues "*word = value" on `stream`, after a memory barrier over the stream's earlier work.
  void write(cudaStream_t stream, uint32_t* word, uint32_t value) const;
  // The device-triggered copy of the fused ops' ce legs (docs/memory_ordering.md "ag-fused-ce"):
  // wait until *trigger == 1 (a kernel of the same op stores it on every path), reset it to 0
  // (set again only by the next call's kernel), then copy `bytes` from `src` to `dst`.
  void triggered_copy(cudaStream_t stream, uint32_t* trigger, void* dst, const void* src, size_t bytes) const;

 private:
  void* wait_ = nullptr;
  void* write_ = nullptr;
};

}  // namespace weave::comm
