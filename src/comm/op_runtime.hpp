// The per-op runtime every protocol op stands on (Collective, GemmAllGather, ...; internal): the
// group it runs on, its window, the protocol regions of that window (control, credits, flags),
// the mapped error record a timed-out device wait fills, and the steps every op takes once:
// configuration agreement, and initialising its words before any peer may write them.
//
// Lifecycle (collective steps marked C):
//   OpRuntime rt(group);                        local
//   rt.agree_config(id, what);                 C  every rank asked for the same op (kMismatch)
//   rt.attach(window, regions, ...);           C  error record, Proto, init kernel (bounded), barrier
//   ... kernels take rt.proto() by value; rt.check() raises a recorded timeout (kTimeout) ...
#pragma once
#include <atomic>
#include <exception>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "comm/call_order.hpp"
#include "comm/device_error.hpp"
#include "comm/group.hpp"
#include "comm/kernels.hpp"

namespace weave::comm {

// Where an op's protocol words are in its window (identical on every rank).
struct ProtoRegions {
  std::uint64_t control = 0, credits = 0, flags = 0;
  int flag_blocks = 1;  // flags hold [kFlagPhases][world][flag_blocks] u32 (Proto::max_blocks)
};

class OpRuntime {
 public:
  explicit OpRuntime(Group& group) : group_(&group) {}
  ~OpRuntime() { release(); }
  OpRuntime(const OpRuntime&) = delete;
  OpRuntime& operator=(const OpRuntime&) = delete;

  // Collective: every rank's `id` (a configuration string) must be equal; else every rank raises
  // kMismatch naming `what`.
  void agree_config(const std::string& id, std::string_view what) const;

  // Collective: takes the window, fills the Proto, allocates the error record and initialises the
  // op's words (flags and credits = initial_epoch, control zeroed, epoch = initial_epoch) on a
  // stream of its own, waited for with the group's timeout; then a barrier, so no peer writes
  // this rank's words before they were initialised. needs_peers: raise kUnavailable unless every
  // rank's window is mapped here (load/store transports).
  void attach(std::shared_ptr<OpWindow> window, const ProtoRegions& regions, bool flow_control,
              std::uint32_t initial_epoch, bool needs_peers, std::uint32_t stale_slot_lag = 0);

  // Raises Error(kTimeout) naming `what` and the record (rank, peer, flag, expected, seen) when a
  // device wait of this op timed out, Error(kMismatch) when a call found a peer's zero-copy buffer
  // at another window offset (both offsets), Error(kInternal) after an exception escaped a call
  // mid-enqueue. Does not synchronise.
  void check(std::string_view what) const;
  bool timed_out() const noexcept;

  Group& group() const noexcept { return *group_; }
  OpWindow& window() const noexcept { return *window_; }
  const std::shared_ptr<OpWindow>& window_ptr() const noexcept { return window_; }
  const Proto& proto() const noexcept { return proto_; }
  bool attached() const noexcept { return window_ != nullptr; }

  // Frees the error record and drops the window reference (the last op sharing a window frees it).
  void release() noexcept;

  // Held by run() for the time it enqueues: a second thread entering run() of the same op meanwhile
  // gets Error(kInvalidArgument) naming `what` (the epoch is read and advanced per call on the
  // device in stream order, so two threads' calls would interleave unpredictably; issue 16 item 3).
  // It also keeps this rank's calls of every op in host order across streams (comm/call_order.hpp):
  // a call on another stream than the rank's previous call waits for it on the GPU.
  class CallGuard {
   public:
    CallGuard(const OpRuntime& rt, std::string_view what, cudaStream_t stream);
    ~CallGuard();
    CallGuard(const CallGuard&) = delete;
    CallGuard& operator=(const CallGuard&) = delete;
    // The argument checks passed and the call now enqueues GPU work: an exception escaping from
    // here on may leave the op's words half-advanced, so it breaks the op (check() raises).
    void enqueueing() noexcept { enqueueing_ = true; }

   private:
    CallOrder order_;  // constructed first: if the thread check below raises, it records nothing
    const OpRuntime* rt_;
    int uncaught_ = std::uncaught_exceptions();
    bool enqueueing_ = false;
  };

 private:
  Group* group_;
  std::shared_ptr<OpWindow> window_;
  DeviceErrorRecord* err_ = nullptr;  // mapped pinned host memory
  Proto proto_{};
  mutable std::atomic<bool> in_call_{false};
  mutable std::atomic<bool> broken_{false};  // an exception escaped mid-enqueue (CallGuard::enqueueing)
};

}  // namespace weave::comm
