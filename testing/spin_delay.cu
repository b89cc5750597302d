#include "testing/spin_delay.hpp"

#include <cuda_runtime.h>

#include "common/check.hpp"

namespace weave::bench {

namespace {

__global__ void spin_kernel(uint64_t ns) {
  uint64_t t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 >= ns) break;
    __nanosleep(1000);
  }
}

}  // namespace

void spin_delay(uint64_t ns, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(ns);
  WEAVE_CHECK_LAUNCH();
}

}  // namespace weave::bench
