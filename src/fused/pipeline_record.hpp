// A fused op's own GEMM-pipeline timeout record (docs/memory_ordering.md "pipeline-abort"). Its
// kernels write a timed-out ring wait here instead of into the process-wide record, so the op's
// check() reports it (before, the op stayed clean and an unrelated weave::Gemm raised it later).
#pragma once
#include <cstdint>
#include <string>

#include "hopper/wait_record.hpp"

namespace weave::fused {

// The bound of the GEMM-pipeline waits of a fused kernel whose consumers wait for peers inside the
// pipeline (GemmAllReduce's combine: one wait per peer, in turn, each with its own comm timeout T).
// A tile's epilogue may then wait up to (W - 1) T before its stage is released, so the producer's
// bound is W T + 5 s: the comm wait, which names the peer, always fires first
// (docs/memory_ordering.md "ar-fused", Pipeline bound). W = 2 keeps the former 2 T + 5 s.
inline uint64_t peer_waiting_pipeline_bound_ns(int world, double comm_timeout_s) {
  const int waits = world > 1 ? world - 1 : 1;  // sequential peer waits in one tile's epilogue
  return static_cast<uint64_t>(((waits + 1) * comm_timeout_s + 5.0) * 1e9);
}

class PipelineRecord {
 public:
  PipelineRecord();  // mapped pinned host memory; Error(kUnavailable) if there is none
  ~PipelineRecord();
  PipelineRecord(const PipelineRecord&) = delete;
  PipelineRecord& operator=(const PipelineRecord&) = delete;

  // What the op's kernels get as MainloopArgs::timeout_record.
  hopper::WaitTimeoutRecord* device() const noexcept { return rec_; }
  // Raises Error(kTimeout) "<op>: GEMM pipeline wait timed out ..." once a kernel of the op recorded
  // a timeout, and on every later call (the op is unusable from then on).
  void check(const char* op) const;

 private:
  hopper::WaitTimeoutRecord* rec_ = nullptr;
  mutable std::string latched_;  // the report, kept: taking it clears the record
};

}  // namespace weave::fused
