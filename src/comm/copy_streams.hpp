// The copy streams of an op whose copy-engine work runs beside its caller's stream: one
// non-blocking stream per peer, forked from the caller's stream and joined back into it with
// events, so a call stays one unit of stream order (and graph-capturable) while its copies run
// in parallel. Used by the ce transport's collectives and by GemmAllGather fused-ce.
#pragma once
#include <cuda_runtime.h>

#include <vector>

namespace weave::comm {

class CopyStreams {
 public:
  CopyStreams() = default;
  ~CopyStreams();
  CopyStreams(const CopyStreams&) = delete;
  CopyStreams& operator=(const CopyStreams&) = delete;

  // Creates `count` streams (and their join events) on the current device; none before.
  void open(int count);
  int size() const noexcept { return static_cast<int>(streams_.size()); }
  cudaStream_t operator[](int i) const { return streams_[static_cast<size_t>(i)]; }
  // Every copy stream waits for the work enqueued on `main` so far.
  void fork(cudaStream_t main);
  // Every copy stream waits for `event` (recorded elsewhere, e.g. a kernel's launch-completion event).
  void fork_after(cudaEvent_t event);
  // An event owned with the streams, for fork_after (e.g. a kernel's launch-completion event).
  cudaEvent_t start_event() const noexcept { return start_; }
  // `main` waits for everything enqueued on the copy streams so far.
  void join(cudaStream_t main);
  // Destroys the streams and events (idempotent; on the op's device).
  void release() noexcept;

 private:
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> joins_;
  cudaEvent_t fork_ = nullptr;
  cudaEvent_t start_ = nullptr;
};

}  // namespace weave::comm
