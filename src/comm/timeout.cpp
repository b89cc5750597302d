#include "comm/timeout.hpp"

#include <cuda_runtime.h>

#include <chrono>
#include <thread>

#include "common/check.hpp"
#include "common/env.hpp"

namespace weave::comm {

// Every wait is bounded: an infinite, NaN or absurd timeout is refused, not converted (a double
// past 2^64 ns converted to uint64_t for the device waits is undefined behaviour).
void expect_timeout_s(double seconds, const std::string& what) {
  WEAVE_EXPECT_ARG(seconds > 0 && seconds <= kMaxTimeoutS,
                   what << " must be a finite number of seconds in (0, " << kMaxTimeoutS << "], got " << seconds);
}

double resolve_timeout(double requested) {
  if (requested == 0) {
    const double env = env::get_double("WEAVE_COMM_TIMEOUT_S", 10.0);
    expect_timeout_s(env, "WEAVE_COMM_TIMEOUT_S");
    return env;
  }
  expect_timeout_s(requested, "CommOptions::timeout_s (0 for the default: WEAVE_COMM_TIMEOUT_S or 10 s)");
  return requested;
}

void sync_stream_bounded(cudaStream_t stream, double timeout_s, const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  std::chrono::microseconds pause{5};
  while (true) {
    const cudaError_t st = cudaStreamQuery(stream);
    if (st == cudaSuccess) return;
    if (st != cudaErrorNotReady) WEAVE_CHECK_CUDA(st);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    WEAVE_EXPECT(waited <= timeout_s, Status::kTimeout,
                 what << ": still running after " << waited << " s (the communicator's timeout is " << timeout_s
                      << " s; WEAVE_COMM_TIMEOUT_S / CommOptions::timeout_s)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds{1000});
  }
}

}  // namespace weave::comm
