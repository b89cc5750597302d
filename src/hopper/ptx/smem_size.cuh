// Thin 1:1 wrapper over the special register that gives a CTA's dynamic shared memory size (PTX ISA
// "Special Registers", %dynamic_smem_size): a kernel whose last region's offset is "the end" reads it.
#pragma once
#include <cstdint>

namespace weave::ptx {

// mov.u32 %dynamic_smem_size: the bytes of dynamic shared memory this CTA was launched with.
__device__ __forceinline__ uint32_t dynamic_smem_size() {
  uint32_t r;
  asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(r));
  return r;
}

}  // namespace weave::ptx
