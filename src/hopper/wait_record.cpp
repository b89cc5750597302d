#include "hopper/wait_record.hpp"

#include <cuda_runtime.h>

#include <mutex>
#include <sstream>

#include "hopper/wait_report.hpp"

namespace weave::hopper {

static WaitTimeoutRecord* g_record = nullptr;
static std::once_flag g_once;

WaitTimeoutRecord* wait_timeout_record() {
  std::call_once(g_once, [] {
    void* p = nullptr;
    if (cudaHostAlloc(&p, sizeof(WaitTimeoutRecord), cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess) {
      *static_cast<WaitTimeoutRecord*>(p) = WaitTimeoutRecord{};
      g_record = static_cast<WaitTimeoutRecord*>(p);
    } else {
      cudaGetLastError();  // clear: the record is optional
    }
  });
  return g_record;  // unified addressing: the host pointer is valid on every device
}

// What the waiting thread waited on, as the report names it.
static const char* wait_site_name(uint32_t site) {
  switch (static_cast<WaitSite>(site)) {
    case WaitSite::kProducerEmpty: return "empty";
    case WaitSite::kConsumerFull: return "full";
    case WaitSite::kProducerScalesEmpty: return "tile-scales empty";
    case WaitSite::kConsumerScalesFull: return "tile-scales full";
    case WaitSite::kGemvLanded: return "gemv landed partials";
  }
  return "unknown-site";
}

std::string format_wait_timeout(const WaitTimeoutRecord& r) {
  if (r.magic != kWaitTimeoutMagic) return "";
  std::ostringstream os;
  os << "GEMM pipeline wait timed out after " << r.waited_ns / 1000000 << " ms: block " << r.block << " thread "
     << r.thread << " waiting on " << wait_site_name(r.site)
     << "[" << r.stage << "] parity " << r.parity;
  return os.str();
}

std::string take_wait_timeout_report() { return take_wait_timeout_report(g_record); }

std::string take_wait_timeout_report(WaitTimeoutRecord* record) {
  if (record == nullptr) return "";
  volatile WaitTimeoutRecord* r = record;
  if (r->magic != kWaitTimeoutMagic) return "";
  // A copy of what the kernel wrote (it is done: the magic is stored last, after a system fence).
  WaitTimeoutRecord copy;
  copy.magic = r->magic;
  copy.site = r->site;
  copy.stage = r->stage;
  copy.parity = r->parity;
  copy.block = r->block;
  copy.thread = r->thread;
  copy.waited_ns = r->waited_ns;
  r->magic = 0;
  r->claimed = 0;
  return format_wait_timeout(copy);
}

}  // namespace weave::hopper
