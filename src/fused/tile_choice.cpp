#include "fused/tile_choice.hpp"

#include <sstream>

#include "common/check.hpp"

namespace weave::fused {

std::vector<gemm::TileCandidate> fused_tile_candidates(const GemmProblem& p, const FusedBuilt& fused_built) {
  const std::vector<gemm::TileCandidate> local = gemm::gemm_tile_candidates(p);
  std::vector<gemm::TileCandidate> both;
  for (const auto& c : local)
    if (fused_built(c.block_m, c.block_n)) both.push_back(c);
  return both.empty() ? local : both;
}

std::string fused_tiles_list(const std::vector<gemm::TileCandidate>& cands) {
  std::ostringstream os;
  for (size_t i = 0; i < cands.size(); ++i) os << (i ? ", " : "") << cands[i].block_m << "x" << cands[i].block_n;
  return os.str();
}

std::string kernel_names_line(const std::vector<std::string>& names) {
  if (names.empty()) return "";
  const std::string prefix = names.front().substr(0, names.front().rfind('_') + 1);
  bool shared = names.size() > 1;
  for (const auto& n : names) shared = shared && n.compare(0, prefix.size(), prefix) == 0 && n.rfind('_') + 1 == prefix.size();
  std::string out = shared ? prefix + "{" : "";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? "," : "") + (shared ? names[i].substr(prefix.size()) : names[i]);
  return shared ? out + "}" : out;
}

GemmPlan fused_tile_plan(const GemmProblem& p, int ctas, const std::vector<gemm::TileCandidate>& cands,
                         FusedTile forced, const std::function<bool(const gemm::TileCandidate&)>& keep) {
  std::vector<gemm::TileCandidate> kept;
  if (keep)
    for (const auto& c : cands)
      if (keep(c)) kept.push_back(c);
  const std::vector<gemm::TileCandidate>& from = kept.empty() ? cands : kept;
  GemmPlanOverrides o;
  o.split_k = 1;
  if (forced.forced()) {
    bool found = false;
    for (const auto& c : cands) found = found || (c.block_m == forced.block_m && c.block_n == forced.block_n);
    WEAVE_EXPECT_ARG(found, "forced fused tile " << forced.block_m << "x" << forced.block_n << ": not built for "
                                                 << to_string(p.mode) << " -> " << to_string(p.out_dtype)
                                                 << " with this operator's epilogue (built: " << fused_tiles_list(cands)
                                                 << ")");
    o.block_m = forced.block_m;
    o.block_n = forced.block_n;
    return gemm::gemm_plan_tiles(p, ctas, o, cands);
  }
  return gemm::gemm_plan_tiles(p, ctas, o, from);
}

}  // namespace weave::fused
