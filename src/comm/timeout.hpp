// The communication layer's one timeout: every device wait on a flag or a peer and every host
// wait is bounded by it (CommOptions::timeout_s, or WEAVE_COMM_TIMEOUT_S, or 10 s).
#pragma once
#include <string>

typedef struct CUstream_st* cudaStream_t;

namespace weave::comm {

inline constexpr double kMaxTimeoutS = 1e6;  // ~11.6 days: far above any real wait, far below 2^64 ns

// `requested` if it is a finite number of seconds in (0, kMaxTimeoutS]; 0 means the default
// (WEAVE_COMM_TIMEOUT_S, else 10 s). Negative, NaN, infinite or larger values raise
// kInvalidArgument naming the option: an infinite wait is a hang, and a double past 2^64 ns
// converted to the device waits' uint64_t nanoseconds is undefined behaviour.
double resolve_timeout(double requested);

// Raises kInvalidArgument naming `what` unless `seconds` is a finite number in (0, kMaxTimeoutS].
void expect_timeout_s(double seconds, const std::string& what);

// Waits until every operation enqueued on `stream` so far has finished, at most `timeout_s`
// seconds (polling cudaStreamQuery, backing off to 1 ms). On timeout raises Error(kTimeout):
// "<what>: still running after <t> s". A CUDA error of the stream's work is raised as such.
void sync_stream_bounded(cudaStream_t stream, double timeout_s, const std::string& what);

}  // namespace weave::comm
