// Thin 1:1 wrappers over the loads, stores and asynchronous copies the GEMM uses, named after the
// instruction (space, caching, width). Weak (plain) semantics unless the name says otherwise.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace weave::ptx {

// ld.shared.f32 / ld.shared.v2.f32
__device__ __forceinline__ float ld_shared_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ float2 ld_shared_v2_f32(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}

// ld.shared.u32 / ld.shared.v2.u32 / ld.shared.v4.u32 (address aligned to the access width)
__device__ __forceinline__ uint32_t ld_shared_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
// ld.volatile.shared.u32 / st.volatile.shared.u32: a word other threads of the CTA write while
// this one polls it (the GEMM kernel's abort word), never cached in a register.
__device__ __forceinline__ uint32_t ld_volatile_shared_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.volatile.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void st_volatile_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.volatile.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint2 ld_shared_v2_u32(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ld_shared_v4_u32(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// st.shared.v2.f32 (address 8-byte aligned)
__device__ __forceinline__ void st_shared_v2_f32(uint32_t addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

// stmatrix.sync.aligned.m8n8.x4.shared.b16: warp-collective store of four 8x8 b16 matrices.
// Register r<j> of lane l holds row l/4, columns 2*(l%4), 2*(l%4)+1 of matrix j (the mma
// accumulator fragment layout); lane l gives the shared address of row l%8 of matrix l/8.
__device__ __forceinline__ void stmatrix_sync_aligned_m8n8_x4_shared_b16(uint32_t addr, uint32_t r0, uint32_t r1,
                                                                         uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// st.global.b32 / st.global.v2.f32: plain stores (the epilogue writes each element once).
__device__ __forceinline__ void st_global_b32(void* ptr, uint32_t v) {
  asm volatile("st.global.b32 [%0], %1;\n" ::"l"(ptr), "r"(v) : "memory");
}
__device__ __forceinline__ void st_global_v2_f32(void* ptr, float x, float y) {
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(ptr), "f"(x), "f"(y) : "memory");
}

// cp.async.ca.shared.global [dst], [src], 4, src_size: asynchronous 4-byte copy global -> shared;
// src_size 0 reads nothing and writes zeros (used for rows past the tensor).
__device__ __forceinline__ void cp_async_ca_shared_global_4(uint32_t dst, const void* src, uint32_t src_size) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_size)
               : "memory");
}

// cp.async.wait_all: waits for every cp.async this thread issued.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

}  // namespace weave::ptx
