// The decode route of weave::Gemm: at m <= detail::kGemvMaxM, the GEMV or the tiled kernels.
//
// The GEMV streams B near the read rate with one token tile (m <= 8), but its cost grows with m
// (each n8 token tile adds an A fragment load, two MMAs and four adds per 64-byte step, and the A
// slice, m x k_slice bytes of shared memory, pushes the K split up and the clusters into more
// waves), while the tiled kernels' time is flat in m. Measured on H100 (2026-12-06,
// GemvBandwidth.GemvOrTilesByM, docs/perf/gemv_or_tiles_by_m_h100.txt: 6 decode shapes x bf16,
// ptpc, blockscale x m 1-32), GEMV time / tiled time: 0.73-1.10 at m <= 8 (1.28 at one short-row
// bf16 shape), 0.78-1.40 at 9-16 (fp8 0.78-1.27, bf16 0.93-1.40), 0.90-1.61 at 17-32.
// The rule depends on m and the mode only, so every GEMM of a decode step takes the same route: a
// layer mixing GEMV and tiled kernels ran 10-20 us slower per step than either alone (whole-layer
// bench, docs/perf/gemm.md), far more than a per-shape choice could gain (the measured optimum per
// shape is 1.1% below this rule's total over the table). fp8 at m 9-16 took the GEMV until the
// small-M tiles (64-row tiles, split-K with a PDL reduction) passed it: whole decode layers of 8
// presets (`weave bench decode --tp 2,8 -m 8,12,16,24,32 --quant ptpc,blockscale --compare-routes`,
// H100 2026-12-06, docs/perf/decode_routes_fp8_m8_32_h100.txt) ran 0.84-0.96x the GEMV route's
// time on the tiles at m 12 and 16 in every layer (and 0.87-1.10x the GEMV with PDL); at m 8
// 0.89-1.00x, but the GEMV with PDL (a caller opt-in the tiles do not use) won 5 of 8 there.
//   - m <= 8: the GEMV;
//   - mxfp8 at m <= 32 (not measured against the tiles) and problems the tiled kernels refuse:
//     the GEMV;
//   - otherwise the tiled kernels.
#include <string>

#include "gemm/planner.hpp"
#include "gemv/gemv.hpp"
#include "weave/gemm.hpp"

namespace weave::gemm {

namespace {

constexpr int64_t kGemvMaxMAnyMode = 8;

bool tiles_can_run(const GemmProblem& problem) {
  return gemm_problem_violations(problem).empty() && !gemm_tile_candidates(problem).empty();
}

}  // namespace

GemvRoute gemv_route(const GemmProblem& problem) {
  const std::string m = "m = " + std::to_string(problem.m);
  if (problem.m > detail::kGemvMaxM) return {false, m + " > " + std::to_string(detail::kGemvMaxM)};
  const std::string gemv_why = detail::gemv_unsupported_reason(problem);
  if (!gemv_why.empty()) return {false, "the GEMV cannot run it: " + gemv_why};
  if (!tiles_can_run(problem)) return {true, m + ": decode GEMV (the tiled kernels cannot run it)"};
  if (problem.mode == ScaleMode::kMxfp8) return {true, m + ": decode GEMV (mxfp8 at m <= 32)"};
  if (problem.m <= kGemvMaxMAnyMode) return {true, m + " <= " + std::to_string(kGemvMaxMAnyMode) + ": decode GEMV, memory-bound on B"};
  return {false, m + " > " + std::to_string(kGemvMaxMAnyMode) + ": the tiled kernels (measured faster than the GEMV there)"};
}

}  // namespace weave::gemm

namespace weave {

std::string_view to_string(DecodeRoute route) noexcept {
  switch (route) {
    case DecodeRoute::kAuto: return "auto";
    case DecodeRoute::kGemv: return "gemv";
    case DecodeRoute::kTiles: return "tiles";
  }
  return "?";
}

std::optional<DecodeRoute> parse_decode_route(std::string_view name) noexcept {
  if (name == "auto") return DecodeRoute::kAuto;
  if (name == "gemv") return DecodeRoute::kGemv;
  if (name == "tiles") return DecodeRoute::kTiles;
  return std::nullopt;
}

}  // namespace weave
