#include "comm/copy_streams.hpp"

#include "common/check.hpp"

namespace weave::comm {

void CopyStreams::open(int count) {
  release();
  try {
    WEAVE_CHECK_CUDA(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
    WEAVE_CHECK_CUDA(cudaEventCreateWithFlags(&start_, cudaEventDisableTiming));
    for (int i = 0; i < count; ++i) {
      cudaStream_t s = nullptr;
      WEAVE_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      streams_.push_back(s);
      cudaEvent_t ev = nullptr;
      WEAVE_CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      joins_.push_back(ev);
    }
  } catch (...) {
    release();
    throw;
  }
}

CopyStreams::~CopyStreams() { release(); }

void CopyStreams::fork(cudaStream_t main) {
  WEAVE_CHECK_CUDA(cudaEventRecord(fork_, main));
  for (auto s : streams_) WEAVE_CHECK_CUDA(cudaStreamWaitEvent(s, fork_, 0));
}

void CopyStreams::fork_after(cudaEvent_t event) {
  for (auto s : streams_) WEAVE_CHECK_CUDA(cudaStreamWaitEvent(s, event, 0));
}

void CopyStreams::join(cudaStream_t main) {
  for (size_t i = 0; i < streams_.size(); ++i) {
    WEAVE_CHECK_CUDA(cudaEventRecord(joins_[i], streams_[i]));
    WEAVE_CHECK_CUDA(cudaStreamWaitEvent(main, joins_[i], 0));
  }
}

void CopyStreams::release() noexcept {
  for (auto s : streams_) cudaStreamDestroy(s);
  for (auto e : joins_) cudaEventDestroy(e);
  streams_.clear();
  joins_.clear();
  if (fork_) cudaEventDestroy(fork_);
  if (start_) cudaEventDestroy(start_);
  fork_ = start_ = nullptr;
}

}  // namespace weave::comm
