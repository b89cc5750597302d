// Host-issue order of the calls of every op on one communicator rank, kept on the GPU across
// streams (issue 16 items 3 and 7). The ops' call protocols assume that calls run one after another
// in the order the host issued them: one op's epoch is read and advanced on the device per call (two
// overlapping calls of one op on two streams would take the same epoch, or run in the other order),
// and two ops whose kernels wait on peers can deadlock when they run at once on two streams and
// their grids are not resident together. So a call on a stream other than the previous call's (of
// any op of this rank) first waits on the GPU for that call to complete (cudaStreamWaitEvent on an
// event recorded after it; the host never waits). Calls on one stream pay nothing but the record.
//
// Not covered: calls captured into CUDA graphs (their stream is capturing: nothing is recorded or
// waited, the graph's own order applies) and their replays relative to eager calls on other streams.
// Ranks must issue their ops in the same order (as every collective library demands); otherwise
// the per-rank orders can wait on each other until the ops' timeouts.
#pragma once
#include <cuda_runtime.h>

namespace weave::comm {

class CallOrder {
 public:
  // At the start of an op's run(), before anything is enqueued: `key` names the rank (Group::
  // call_order_key: the communicator, or the emulated rank).
  CallOrder(const void* key, cudaStream_t stream);
  // After run() enqueued its whole call (not on an exception: nothing was enqueued then, or the op
  // is unusable).
  ~CallOrder();
  CallOrder(const CallOrder&) = delete;
  CallOrder& operator=(const CallOrder&) = delete;

  // Testing only (the negative control): false stops ordering calls across streams process-wide.
  static void set_enabled_for_testing(bool on) noexcept;

 private:
  const void* key_;
  cudaStream_t stream_;
  bool capturing_ = false;
  int exceptions_ = 0;
};

}  // namespace weave::comm
