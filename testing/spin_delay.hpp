// A deliberately slow rank for tests and benchmarks: enqueues a one-thread kernel that spins (with
// nanosleep back-off) for `ns` nanoseconds of the GPU's global timer.
#pragma once
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace weave::bench {

void spin_delay(uint64_t ns, cudaStream_t stream);

}  // namespace weave::bench
