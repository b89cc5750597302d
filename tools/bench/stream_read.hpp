// A plain streaming read over device memory: the ceiling a memory-bound kernel of one launch can
// reach on the same bytes (16-byte loads, four in flight per thread, a grid of up to 8 blocks of
// 256 threads per SM). The decode benches time it beside the GEMV over the very bytes the GEMV
// reads, and over 1 GiB (far past the L2) for the HBM read ceiling of the run.
#pragma once
#include <cstddef>
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace weave::bench {

// Enqueues one read of `bytes` (a multiple of 16; a tail is not read) from `p`. The xor of what
// was read goes to `sink` (one device uint32) only if it equals a magic value: the loads stay
// alive, and nothing is written in practice.
void launch_stream_read(const void* p, std::size_t bytes, std::uint32_t* sink, int num_sms, cudaStream_t stream);

// The HBM read ceiling of the current device in GB/s: the median of 9 graph replays of 4 reads
// of 1 GiB each (the buffer is allocated and freed here). Synchronises `stream`.
double measure_hbm_read_gbps(int num_sms, cudaStream_t stream);

}  // namespace weave::bench
