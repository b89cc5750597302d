#include "fused/split_gemm_leg.hpp"

#include <algorithm>

#include "common/check.hpp"
#include "gemm/operands.hpp"
#include "gemm/planner.hpp"
#include "gemm/split_k_reduce.hpp"
#include "gemv/gemv.hpp"

namespace weave::fused {

uint64_t split_k_partials_bytes(const GemmProblem& p, int split_k) {
  return static_cast<uint64_t>(split_k) * static_cast<uint64_t>(p.m) * static_cast<uint64_t>(p.n) * sizeof(float);
}

uint64_t split_k_partials_bound(const GemmProblem& p, int ctas) {
  const int64_t most_splits = std::min<int64_t>(gemm::kMaxSplitK, p.k / gemm::kMinSplitKElems);
  if (most_splits < 2) return 0;
  int64_t area = 0;
  GemmProblem bf16 = p;  // mxfp8's bf16 route splits the bf16 kernels' tiles
  bf16.mode = ScaleMode::kBF16;
  bf16.scale_layout = ScaleLayout::kRaw;
  for (const GemmProblem& q : {p, bf16})
    for (const auto& t : gemm::gemm_tile_candidates(q)) area = std::max<int64_t>(area, int64_t(t.block_m) * t.block_n);
  const uint64_t by_ctas = uint64_t(std::max(ctas, 1)) * uint64_t(area);
  const uint64_t by_m = uint64_t(most_splits) * uint64_t(p.m) * uint64_t(p.n);
  return std::min(by_ctas, by_m) * sizeof(float);
}

SplitGemmLeg plan_split_gemm_leg(const GemmProblem& p, int ctas, const SplitLegRoom& room) {
  SplitGemmLeg leg;
  if (p.mode == ScaleMode::kMxfp8) return leg;
  GemmPlanOverrides o;
  if (!room.gemv) o.decode_route = DecodeRoute::kTiles;
  GemmPlan plan = gemm_plan(p, ctas, o);
  if (plan.scale_a_mn_copy) {  // no copy pass here: the kernel that reads A's scales as given
    o.scale_a_route = ScaleARoute::kAsGiven;
    plan = gemm_plan(p, ctas, o);
  }
  if (plan.gemv) {
    leg.kind = SplitLegKind::kGemv;
    leg.note = "the GEMM is weave::Gemm's decode GEMV (" + plan.reason + ")";
  } else if (plan.split_k > 1 && !plan.mx_dequant && !plan.scale_a_mn_copy) {
    const int wanted = plan.split_k;
    if (split_k_partials_bytes(p, wanted) > room.scratch_bytes) {
      // The most splits whose partials fit, where the split-K model still says they pay.
      const int64_t fit = static_cast<int64_t>(room.scratch_bytes / split_k_partials_bytes(p, 1));
      const int64_t k_blocks = p.k / plan.block_k;
      int best = 1;
      double best_us = gemm::split_k_model_us(p, plan.block_m, plan.block_n, k_blocks, 1);
      for (int64_t sk = 2; sk <= std::min<int64_t>(fit, wanted - 1); ++sk)
        if (const double t = gemm::split_k_model_us(p, plan.block_m, plan.block_n, k_blocks, sk); t < best_us)
          best = static_cast<int>(sk), best_us = t;
      if (best < 2) return leg;  // kTiles: the op's own tile
      o.block_m = plan.block_m;
      o.block_n = plan.block_n;
      o.split_k = best;
      plan = gemm_plan(p, ctas, o);
    }
    leg.kind = SplitLegKind::kSplitK;
    leg.partials_kernel =
        gemm::find_gemm_instance(p.mode, DType::kF32, gemm::EpilogueKind::kStoreLocal, plan.block_m, plan.block_n,
                                 gemm::instance_scale_layout(p.mode, p.scale_layout));
    WEAVE_EXPECT(leg.partials_kernel != nullptr && plan.kernel == leg.partials_kernel->name, Status::kInternal,
                 "split GEMM leg: the planned split-K kernel " << plan.kernel << " is not the registered fp32 instance");
    leg.partials_bytes = split_k_partials_bytes(p, plan.split_k);
    leg.note = "the GEMM splits K " + std::to_string(plan.split_k) + " ways as weave::Gemm does (" +
               std::to_string(plan.block_m) + "x" + std::to_string(plan.block_n) + ", " + std::to_string(plan.tiles) +
               " tiles on " + std::to_string(ctas) + " CTAs; fp32 partials in the op's own region" +
               (plan.split_k < wanted ? ", where " + std::to_string(wanted) + " ways would not fit" : std::string()) + ")";
  } else {
    return leg;
  }
  leg.plan = plan;
  return leg;
}

void enqueue_split_gemm_leg(const SplitGemmLeg& leg, const GemmProblem& p, const TensorView& a, const TensorView& b,
                            const GemmScales& s, void* out, float* partials, int ctas,
                            hopper::WaitTimeoutRecord* record, cudaStream_t stream) {
  WEAVE_EXPECT(leg.kind != SplitLegKind::kTiles, Status::kInternal, "split GEMM leg: the op's own tile runs kTiles");
  if (leg.kind == SplitLegKind::kGemv) {
    detail::GemvArgs g = gemm::make_gemv_args(p, a, b, s, out, p.n);
    g.record = record;
    detail::gemv_launch(g, ctas, stream);
    return;
  }
  const GemmPlan& plan = leg.plan;
  const gemm::GemmInstance* k = leg.partials_kernel;
  WEAVE_EXPECT(partials != nullptr && reinterpret_cast<uintptr_t>(partials) % 16 == 0, Status::kInternal,
               "split GEMM leg: the partials' scratch must be 16-byte aligned");
  k->prepare();  // its shared-memory limit on the launching device (one idempotent driver call)
  gemm::LocalKernelArgs args{};
  args.main = gemm::make_mainloop_args(p, plan, a, b, s);
  args.main.timeout_record = record;
  args.epi.tma_c = gemm::make_epilogue_map("the split-K partials", partials, DType::kF32, plan.split_k, p.m, p.n, p.n,
                                           k->epi_box_bytes);
  k->launch(args, plan.grid, stream);
  gemm::split_k_reduce(partials, p.m, p.n, plan.split_k, out, p.n, p.out_dtype, ctas, gemm::split_reduce_pdl(p.mode),
                       stream);
}

}  // namespace weave::fused
