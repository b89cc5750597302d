// The fused operators' GEMM tile: the standalone planner's tile rule (gemm/planner_tiles.cpp) over
// the tiles built both with the operator's fused epilogue and with the local store, with no K split
// (a fused epilogue stores and signals final tiles) and on the CTAs the operator has per rank (its
// grid cap). Its split modes run the tile its fused kernel would (the same candidates, the same m,
// the same CTAs), so fused and split agree bitwise at every m. CPU only.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fused/split_gemm_leg.hpp"
#include "gemm/planner.hpp"
#include "weave/gemm.hpp"

namespace weave::fused {

// A tile the tests force (the operators' testing hooks); 0 x 0 is the planner's choice.
struct FusedTile {
  int block_m = 0, block_n = 0;
  bool forced() const { return block_m != 0 || block_n != 0; }
};

// Whether the operator's fused kernel is built at (block_m, block_n) for the problem's mode.
using FusedBuilt = std::function<bool(int block_m, int block_n)>;

// The local-store tiles of `p`'s mode, scale layout and output dtype whose fused twin is built;
// where none is (a build narrowed without this operator's fused kernels for the mode), every local
// tile: such an op runs split modes only.
std::vector<gemm::TileCandidate> fused_tile_candidates(const GemmProblem& p, const FusedBuilt& fused_built);

// "128x128, 256x128" (the tiles a message or a plan lists).
std::string fused_tiles_list(const std::vector<gemm::TileCandidate>& cands);
// Kernel names, one per tile, in one line: "sm90_gemm_bf16_bf16_allgather_{128x128x64,256x128x64}"
// where they differ only in the tile (the part after the last '_'), else comma-separated.
std::string kernel_names_line(const std::vector<std::string>& names);
// Whether `fused(block_m, block_n)` (a GemmKernelEntry or null) has a kernel at any of `cands`.
template <class FusedLookup>
bool any_fused_kernel(const std::vector<gemm::TileCandidate>& cands, FusedLookup&& fused) {
  for (const auto& t : cands)
    if (fused(t.block_m, t.block_n) != nullptr) return true;
  return false;
}
// The names of the fused kernels `fused(block_m, block_n)` has at `cands` (a GemmKernelEntry or
// null each), in one line; "" where there is none.
template <class FusedLookup>
std::string fused_kernel_names(const std::vector<gemm::TileCandidate>& cands, FusedLookup&& fused) {
  std::vector<std::string> names;
  for (const auto& t : cands)
    if (const auto* k = fused(t.block_m, t.block_n)) names.emplace_back(k->name);
  return kernel_names_line(names);
}

// An op's plans by m, each made once: run() plans every call, and the rules write their reasons
// as text. Every input but m is fixed per op. At most kMaxPlans m are held (a bound on the host
// memory; a dropped m is planned again); a reference from at() lasts until the next at().
template <class Plan>
class PerMCache {
 public:
  template <class PlanOf>
  const Plan& at(int64_t m, PlanOf&& plan_of) {
    if (const auto it = plans_.find(m); it != plans_.end()) return it->second;
    if (plans_.size() >= kMaxPlans) plans_.clear();
    return plans_.emplace(m, plan_of(m)).first->second;
  }

 private:
  static constexpr std::size_t kMaxPlans = 64;
  std::map<int64_t, Plan> plans_;
};
using TilePlanCache = PerMCache<GemmPlan>;

// What a fused op's call of m rows runs, made once per m: the tile GEMM's plan, the op's schedule
// of it (its bands and rounds, or its chunks), the public plan (mode, model, reason) and the split
// modes' GEMM where it differs from the tile's.
template <class Schedule, class PublicPlan>
struct PlannedCall {
  GemmPlan gemm;
  Schedule sched;
  PublicPlan plan;
  SplitGemmLeg leg;  // the split modes' GEMM where it is not the tile's (fused/split_gemm_leg.hpp)
};

// One call's tile GEMM plan on `ctas` CTAs: the planner's rule on the candidates `keep` accepts
// (all of them where it accepts none, or where `keep` is empty), split_k 1; `forced` takes that
// tile instead (kInvalidArgument naming the built tiles where it is not a candidate).
GemmPlan fused_tile_plan(const GemmProblem& p, int ctas, const std::vector<gemm::TileCandidate>& cands,
                         FusedTile forced, const std::function<bool(const gemm::TileCandidate&)>& keep = {});

}  // namespace weave::fused
