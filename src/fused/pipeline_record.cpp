#include "fused/pipeline_record.hpp"

#include <cuda_runtime.h>

#include "common/check.hpp"

namespace weave::fused {

PipelineRecord::PipelineRecord() {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, sizeof(hopper::WaitTimeoutRecord), cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    WEAVE_EXPECT(false, Status::kUnavailable,
                 "no mapped pinned host memory for the op's pipeline timeout record: " << cudaGetErrorString(e));
  }
  rec_ = static_cast<hopper::WaitTimeoutRecord*>(p);
  *rec_ = hopper::WaitTimeoutRecord{};
}

PipelineRecord::~PipelineRecord() {
  if (rec_) cudaFreeHost(rec_);
}

void PipelineRecord::check(const char* op) const {
  if (latched_.empty()) latched_ = hopper::take_wait_timeout_report(rec_);
  WEAVE_EXPECT(latched_.empty(), Status::kTimeout,
               op << ": " << latched_
                  << " inside this op's GEMM kernel (its pipeline stalled past its bound); the op is unusable after a "
                     "timeout; destroy it on every rank.");
}

}  // namespace weave::fused
