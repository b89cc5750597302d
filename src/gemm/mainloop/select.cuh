// Which main loop a (tile, scale policy) pair runs, and the policy traits the kernel reads.
#pragma once
#include <cstdint>
#include <type_traits>

#include "gemm/mainloop/bf16.cuh"
#include "gemm/mainloop/mx32_sets.cuh"
#include "gemm/mainloop/per_block.cuh"
#include "gemm/mainloop/two_block_sets.cuh"
#include "gemm/scale_policy.cuh"

namespace weave::gemm {

// K elements per scale group of a main-loop scale policy; 0 for policies without one.
template <class Scale>
constexpr int scale_group_k() {
  if constexpr (requires { Scale::kGroupK; }) return Scale::kGroupK;
  else return 0;
}

// Bytes a scale policy adds to each stage's TMA transaction (0 for policies without a TMA part).
template <class Scale, class Tile>
constexpr uint32_t scale_stage_tx_bytes() {
  if constexpr (requires { Scale::template stage_tx_bytes<Tile>(); }) return Scale::template stage_tx_bytes<Tile>();
  else return 0;
}

// Whether 128-row tiles run the two-block-set loop: ptpc always; blockscale when its A scales
// arrive by TMA (with the cp.async gather its consumers waited for data: docs/perf/gemm.md "step 3").
template <class Scale>
constexpr bool two_block_sets() {
  if constexpr (Scale::kWhere == ScaleWhere::kEpilogue) return true;
  else if constexpr (requires { Scale::kTmaRows; }) return Scale::kTmaRows;
  else return false;
}

template <class Tile, class Scale>
struct MainloopSelect {
  using type = std::conditional_t<
      Tile::Input::kBytes == 2, MainloopBf16<Tile>,
      std::conditional_t<scale_group_k<Scale>() == 32, MainloopMx32Sets<Tile, Scale>,
                         std::conditional_t<Tile::kSlices == 1 && two_block_sets<Scale>(),
                                            MainloopTwoBlockSets<Tile, Scale>, MainloopPerBlock<Tile, Scale>>>>;
};
// The consumer main loop of a (tile, scale) instance: one of gemm/mainloop/*.cuh.
template <class Tile, class Scale>
using MainloopFor = typename MainloopSelect<Tile, Scale>::type;

}  // namespace weave::gemm
