// The GEMM instances of each tile a fused operator may run (fused/tile_choice.hpp), found and
// prepared once at construction, so a call only looks up the tile its plan chose.
#pragma once
#include <string>
#include <vector>

#include "common/check.hpp"
#include "gemm/dispatch.hpp"
#include "gemm/planner.hpp"
#include "weave/gemm.hpp"

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

// The kernels of every tile in `tiles` (the op's candidates, problem p's mode, scale layout and
// output dtype): `fused(block_m, block_n)` (null where the op has none) and the local store of the
// same tile, which every candidate has (kInternal naming `op` otherwise). None at all (a build
// narrowed by WEAVE_GEMM_KERNELS without the mode) is kUnavailable naming the mode.
template <class Params, class FusedLookup>
std::vector<TileKernels<Params>> find_tile_kernels(const std::vector<gemm::TileCandidate>& tiles, const GemmProblem& p,
                                                   FusedLookup&& fused, const std::string& op) {
  WEAVE_EXPECT(!tiles.empty(), Status::kUnavailable,
               op << ": no GEMM kernel for " << to_string(p.mode) << " -> " << to_string(p.out_dtype)
                  << " in this build (is it narrowed by WEAVE_GEMM_KERNELS?)");
  std::vector<TileKernels<Params>> set;
  for (const auto& t : tiles) {
    TileKernels<Params> k;
    k.block_m = t.block_m;
    k.block_n = t.block_n;
    k.fused = fused(t.block_m, t.block_n);
    k.local = gemm::find_gemm_instance(p.mode, p.out_dtype, gemm::EpilogueKind::kStoreLocal, t.block_m, t.block_n,
                                       gemm::instance_scale_layout(p.mode, p.scale_layout));
    WEAVE_EXPECT(k.local != nullptr, Status::kInternal,
                 op << ": candidate tile " << t.block_m << "x" << t.block_n << " has no local kernel");
    set.push_back(k);
  }
  return set;
}

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
