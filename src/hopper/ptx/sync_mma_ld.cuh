// Thin 1:1 wrappers over the PTX instructions of the decode GEMV (src/gemv): predicated streaming
// loads, asynchronous copies, mma.sync for e4m3 and bf16, and the programmatic dependent launch
// controls. Named after the instruction. (Namespace kept from their first home in src/gemv.)
#pragma once
#include <cstdint>
#include "hopper/ptx/griddepcontrol.cuh"

namespace weave::detail::gemv::ptx {

// @p ld.global.nc.L1::no_allocate.L2::256B.v4.b32, zero when !pred: the weights are read once
// per call (no L1 allocation) and a row's next 256 bytes are fetched into L2 together. Only for
// memory no kernel writes while this one runs (the non-coherent path).
__device__ __forceinline__ uint4 ld_global_nc_na_l2_256b_v4_pred(const void* ptr, bool pred) {
  uint4 v;
  asm volatile(
      "{\n"
      " .reg .pred p;\n"
      " setp.ne.b32 p, %5, 0;\n"
      " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
      " @p ld.global.nc.L1::no_allocate.L2::256B.v4.b32 {%0, %1, %2, %3}, [%4];\n"
      "}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr), "r"(static_cast<uint32_t>(pred)));
  return v;
}

// mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32: d = a * b + c.
// a: 16x32 e4m3 (4 regs), b: 32x8 e4m3 (2 regs), c/d: 16x8 fp32 (4 regs), PTX ISA fragment layout.
__device__ __forceinline__ void mma_m16n8k32_row_col_f32_e4m3_e4m3_f32(float (&d)[4], uint32_t a0,
                                                                       uint32_t a1, uint32_t a2,
                                                                       uint32_t a3, uint32_t b0,
                                                                       uint32_t b1, const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = a * b + c.
__device__ __forceinline__ void mma_m16n8k16_row_col_f32_bf16_bf16_f32(float (&d)[4], uint32_t a0,
                                                                       uint32_t a1, uint32_t a2,
                                                                       uint32_t a3, uint32_t b0,
                                                                       uint32_t b1, const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}

// cp.async.cg.shared.global [dst], [src], 16, src_size: asynchronous 16-byte copy global ->
// shared through L2 only; src_size 0 reads nothing and writes zeros.
__device__ __forceinline__ void cp_async_cg_shared_global_16(uint32_t dst, const void* src, uint32_t src_size) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_size) : "memory");
}

// cp.async.ca.shared.global [dst], [src], 8, src_size: the same for 8 bytes (cg takes 16 only).
__device__ __forceinline__ void cp_async_ca_shared_global_8(uint32_t dst, const void* src, uint32_t src_size) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_size) : "memory");
}

// cp.async.wait_all: waits until every cp.async this thread issued has landed in shared memory.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Programmatic dependent launch (griddepcontrol.cuh, shared with the collective kernels).
using ::weave::ptx::griddepcontrol_launch_dependents;
using ::weave::ptx::griddepcontrol_wait;

}  // namespace weave::detail::gemv::ptx
