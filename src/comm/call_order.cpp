#include "comm/call_order.hpp"

#include <atomic>
#include <exception>
#include <map>
#include <mutex>

#include "common/check.hpp"

namespace weave::comm {

namespace {

struct LastCall {
  cudaEvent_t done = nullptr;  // recorded after the rank's last eager call (created once per key)
  cudaStream_t stream = nullptr;
  bool recorded = false;
};

std::mutex g_mu;
std::map<const void*, LastCall>& registry() {
  static auto* m = new std::map<const void*, LastCall>();  // never destroyed: ops may outlive statics
  return *m;
}
std::atomic<bool> g_enabled{true};

bool is_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  WEAVE_CHECK_CUDA(cudaStreamIsCapturing(s, &st));
  return st != cudaStreamCaptureStatusNone;
}

}  // namespace

CallOrder::CallOrder(const void* key, cudaStream_t stream)
    : key_(key), stream_(stream), exceptions_(std::uncaught_exceptions()) {
  capturing_ = is_capturing(stream);
  if (capturing_ || !g_enabled.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(g_mu);
  LastCall& last = registry()[key_];
  if (last.recorded && last.stream != stream_) WEAVE_CHECK_CUDA(cudaStreamWaitEvent(stream_, last.done, 0));
}

CallOrder::~CallOrder() {
  if (capturing_ || std::uncaught_exceptions() > exceptions_ || !g_enabled.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(g_mu);
  LastCall& last = registry()[key_];
  if (!last.done && cudaEventCreateWithFlags(&last.done, cudaEventDisableTiming) != cudaSuccess) {
    last.done = nullptr;  // a destructor cannot raise: the next call on another stream is then unordered
    return;
  }
  if (cudaEventRecord(last.done, stream_) == cudaSuccess) {
    last.stream = stream_;
    last.recorded = true;
  }
}

void CallOrder::set_enabled_for_testing(bool on) noexcept { g_enabled.store(on); }

}  // namespace weave::comm
