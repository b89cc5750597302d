#include "comm/op_runtime.hpp"

#include <cuda_runtime.h>

#include <cstring>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "weave/window_layout.hpp"

namespace weave::comm {

void OpRuntime::agree_config(const std::string& id, std::string_view what) const {
  group_->agree(fnv1a64(id.data(), id.size()), what);
}

void OpRuntime::attach(std::shared_ptr<OpWindow> window, const ProtoRegions& regions, bool flow_control,
                       std::uint32_t initial_epoch, bool needs_peers, std::uint32_t stale_slot_lag) {
  Group& g = *group_;
  try {
    window_ = std::move(window);
    WEAVE_CHECK_CUDA(cudaSetDevice(g.device()));
    WEAVE_CHECK_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&err_), sizeof(DeviceErrorRecord),
                                   cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(err_, 0, sizeof(*err_));
    DeviceErrorRecord* err_dev = nullptr;
    WEAVE_CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&err_dev), err_, 0));
    proto_.win = window_->handle();
    proto_.control = regions.control;
    proto_.credits = regions.credits;
    proto_.flags = regions.flags;
    proto_.max_blocks = regions.flag_blocks;
    proto_.flow_control = flow_control ? 1 : 0;
    proto_.timeout_ns = static_cast<uint64_t>(g.timeout_s() * 1e9);  // finite, <= 1e6 s (resolve_timeout)
    proto_.err = err_dev;
    proto_.ranks_per_device = g.ranks_per_device();
    if (needs_peers)
      for (int r = 0; r < g.world_size(); ++r)
        WEAVE_EXPECT(proto_.win.base[r] != nullptr, Status::kUnavailable,
                     "rank " << g.rank() << ": rank " << r << "'s window is not mapped (not in one NVLink domain)");
    cudaStream_t init = nullptr;
    WEAVE_CHECK_CUDA(cudaStreamCreateWithFlags(&init, cudaStreamNonBlocking));
    try {
      launch_init_op(proto_, initial_epoch, init, stale_slot_lag);
      sync_stream_bounded(init, g.timeout_s(), "initialising the op's flags and credits");
    } catch (...) {
      cudaStreamDestroy(init);
      throw;
    }
    WEAVE_CHECK_CUDA(cudaStreamDestroy(init));
    g.barrier();
  } catch (...) {
    release();
    throw;
  }
}

bool OpRuntime::timed_out() const noexcept {
  // Acquire: the device writes the fields, fences (system scope), then sets `valid`; the loads of
  // the fields that follow (describe) must not be satisfied before this one.
  return err_ != nullptr && __atomic_load_n(&err_->valid, __ATOMIC_ACQUIRE) != 0;
}

void OpRuntime::check(std::string_view what) const {
  if (broken_.load())
    throw Error(Status::kInternal, std::string(what), WEAVE_LOCATION,
                "an error escaped while a call of this op was being enqueued (after its argument checks), so its "
                "protocol words may be half-advanced. The op is unusable; destroy it on every rank.");
  if (!timed_out()) return;
  const Status status = error_status(*err_);
  throw Error(status, std::string(what), WEAVE_LOCATION,
              describe(*err_) + (status == Status::kTimeout ? ". The op is unusable after a timeout"
                                                           : ". The op is unusable after this error") +
                  "; destroy it on every rank.");
}

OpRuntime::CallGuard::CallGuard(const OpRuntime& rt, std::string_view what, cudaStream_t stream)
    : order_(rt.group().call_order_key(), stream), rt_(&rt) {
  bool expected = false;
  WEAVE_EXPECT_ARG(rt.in_call_.compare_exchange_strong(expected, true),
                   what << ": called from two threads at once; one op is used by one host thread (and one stream) at a "
                           "time");
}

OpRuntime::CallGuard::~CallGuard() {
  if (enqueueing_ && std::uncaught_exceptions() > uncaught_) rt_->broken_.store(true);
  rt_->in_call_.store(false);
}

void OpRuntime::release() noexcept {
  window_.reset();
  if (err_) {
    cudaSetDevice(group_->device());
    cudaFreeHost(err_);
  }
  err_ = nullptr;
}

}  // namespace weave::comm
