// The persistent static schedule every GEMM kernel instance walks (gemm/kernel.cuh, producer and
// consumers alike), host- and device-callable so the CPU schedule simulations
// (tests/cpu/test_fused_ar_plan.cpp) step their CTAs with the kernel's own functions, not a copy:
//
//   CTA b of a grid of G takes work items b, b + G, b + 2G, ... while the item is < num_items:
//   its k-th item is persistent_item(b, k, G) = b + k * G. Its last item is the one whose next
//   is past the end (the CTA retires its stores there: StagedEpilogue::finish).
//
//   items:   0   1   2   3   4   5   6   7   8   9        (G = 4, num_items = 10)
//   CTA:     0   1   2   3   0   1   2   3   0   1        CTAs 0, 1 take 3 items; 2, 3 take 2
//
// The kernel steps with persistent_first_item / persistent_next_item (an add per item, as before
// this header existed: the instances' SASS is unchanged); persistent_item is the closed form the
// CPU tests hold the stepping to.
#pragma once

#if defined(__CUDACC__)
#define WEAVE_WALK_HD __host__ __device__ __forceinline__
#else
#define WEAVE_WALK_HD inline
#endif

namespace weave::gemm {

// The first item of CTA `cta` (blockIdx.x).
WEAVE_WALK_HD constexpr int persistent_first_item(int cta) { return cta; }

// The item after `item` of the same CTA, in a grid of `grid` CTAs (gridDim.x).
WEAVE_WALK_HD constexpr int persistent_next_item(int item, int grid) { return item + grid; }

// Whether `item` is its CTA's last of `num_items` (its next is past the end).
WEAVE_WALK_HD constexpr bool persistent_last_item(int item, int grid, int num_items) {
  return persistent_next_item(item, grid) >= num_items;
}

// The closed form: the k-th item (k = 0, 1, ...) of CTA `cta`.
WEAVE_WALK_HD constexpr int persistent_item(int cta, int k, int grid) { return cta + k * grid; }

// How many items CTA `cta` takes (0 when cta >= num_items).
WEAVE_WALK_HD constexpr int persistent_items_of(int cta, int grid, int num_items) {
  return cta < num_items ? (num_items - cta + grid - 1) / grid : 0;
}

}  // namespace weave::gemm

#undef WEAVE_WALK_HD
