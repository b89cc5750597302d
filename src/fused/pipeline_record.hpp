// A fused op's own GEMM-pipeline timeout record (docs/memory_ordering.md "pipeline-abort"). Its
// kernels write a timed-out ring wait here instead of into the process-wide record, so the op's
// check() reports it (before, the op stayed clean and an unrelated weave::Gemm raised it later).
#pragma once
#include <string>

#include "hopper/wait_record.hpp"

namespace weave::fused {

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
