// Diagnostic record of a bounded wait that timed out inside a kernel (host/device POD). It lives
// in host-mapped pinned memory, so the host reads it without a device copy once the aborted
// kernel has exited (hopper/pipeline.cuh: the kernel ends cleanly, the CUDA context stays usable).
#pragma once
#include <cstdint>
#include <string>

namespace weave::hopper {

// kProducerEmpty / kConsumerFull: the stage ring (stage = the ring slot). kProducerScalesEmpty /
// kConsumerScalesFull: a per-tile scale buffer (stage = the buffer, 0 or 1; gemm/kernel.cuh, ptpc).
enum class WaitSite : uint32_t {
  kProducerEmpty = 1,
  kConsumerFull = 2,
  kProducerScalesEmpty = 3,
  kConsumerScalesFull = 4,
  kGemvLanded = 5,  // the stream GEMV's landing barrier: peers' partial rows (stage = the cluster rank)
};
inline constexpr uint32_t kWaitTimeoutMagic = 0x7EA7E0u;

struct WaitTimeoutRecord {
  uint32_t magic = 0;  // kWaitTimeoutMagic once written
  uint32_t claimed = 0;  // 1 once a device thread took the record (atomicCAS; the host clears it)
  uint32_t site = 0;   // WaitSite
  uint32_t stage = 0;
  uint32_t parity = 0;
  int32_t block = 0;
  int32_t thread = 0;
  uint64_t waited_ns = 0;
};

// The process-wide record, allocated on first use (cudaHostAlloc mapped; a host call, never in
// a run()). Returns the device-visible pointer, or nullptr if mapped memory is unavailable (an
// aborted kernel then leaves no report; weave::Gemm refuses to run without it).
WaitTimeoutRecord* wait_timeout_record();
// "" if no kernel recorded a timeout; else one line naming block, thread, site, stage, parity.
// Clears the record (and its claim, so a later timeout is recorded again).
std::string take_wait_timeout_report();
// The same for a record of one's own (a fused op's: fused/pipeline_record.hpp); nullptr: "".
std::string take_wait_timeout_report(WaitTimeoutRecord* record);

}  // namespace weave::hopper
