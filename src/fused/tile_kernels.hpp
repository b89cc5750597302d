// The GEMM instances of each tile a fused operator may run (fused/tile_choice.hpp), found and
// prepared once at construction, so a call only looks up the tile its plan chose.
#pragma once
#include <vector>

#include "common/check.hpp"
#include "gemm/dispatch.hpp"

namespace weave::fused {

template <class Params>
struct TileKernels {
  int block_m = 0, block_n = 0;
  const gemm::GemmKernelEntry<Params>* fused = nullptr;  // null where the op runs split modes only
  const gemm::GemmInstance* local = nullptr;              // the split modes' GEMM of the same tile
  // mxfp8's bf16 route (fused/mx_route.hpp): the bf16 kernels of the same tile, or null.
  const gemm::GemmKernelEntry<Params>* fused_bf16 = nullptr;
  const gemm::GemmInstance* local_bf16 = nullptr;

  void prepare() const {
    for (const auto* k : {fused, fused_bf16})
      if (k) k->prepare();
    for (const auto* k : {local, local_bf16})
      if (k) k->prepare();
  }
  // The bf16 route can run at this tile: its local kernel, and its fused one where the op has one.
  bool bf16_route_built() const { return local_bf16 != nullptr && (fused == nullptr || fused_bf16 != nullptr); }
};

// The kernels of tile block_m x block_n, which the op's candidates hold (its plans choose among them).
template <class Params>
const TileKernels<Params>& tile_kernels_at(const std::vector<TileKernels<Params>>& set, int block_m, int block_n,
                                           const char* op) {
  for (const auto& k : set)
    if (k.block_m == block_m && k.block_n == block_n) return k;
  WEAVE_EXPECT(false, Status::kInternal, op << ": the planned tile " << block_m << "x" << block_n << " has no kernels");
  return set.front();  // (unreached)
}

}  // namespace weave::fused
