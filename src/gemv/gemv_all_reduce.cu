// The decode GEMV's all-reduce kernels (gemv_all_reduce.cuh): every mode at 1, 2 and 4 token
// tiles, registers path.
#include "gemv/gemv_all_reduce.cuh"
#include "gemv/gemv_launch.cuh"

namespace weave::detail::gemv {

namespace {

template <ScaleMode kMode>
void launch_mode_all_reduce(const KernelParams& p, const GemvAllReduce& ar, const Launch& l) {
  const CUtensorMap b_map{};  // the registers path reads no tensor map
  switch (l.cfg.tiles) {
    case 1: launch_clusters<gemv_all_reduce_kernel<kMode, 1>>(kMaxSmemBytes, l, p, b_map, ar); break;
    case 2: launch_clusters<gemv_all_reduce_kernel<kMode, 2>>(kMaxSmemBytes, l, p, b_map, ar); break;
    case 4: launch_clusters<gemv_all_reduce_kernel<kMode, 4>>(kMaxSmemBytes, l, p, b_map, ar); break;
    default:
      WEAVE_EXPECT(false, ::weave::Status::kInternal, "gemv all-reduce: no kernel for " << l.cfg.tiles << " token tiles");
  }
}

}  // namespace

void launch_all_reduce(ScaleMode mode, const KernelParams& p, const GemvAllReduce& ar, const Launch& l) {
  WEAVE_EXPECT(l.path == WeightPath::kRegisters, ::weave::Status::kInternal,
               "gemv all-reduce: built for the registers path only");
  switch (mode) {
    case ScaleMode::kBF16: launch_mode_all_reduce<ScaleMode::kBF16>(p, ar, l); break;
    case ScaleMode::kPtpc: launch_mode_all_reduce<ScaleMode::kPtpc>(p, ar, l); break;
    case ScaleMode::kBlockscale: launch_mode_all_reduce<ScaleMode::kBlockscale>(p, ar, l); break;
    case ScaleMode::kMxfp8: launch_mode_all_reduce<ScaleMode::kMxfp8>(p, ar, l); break;
  }
}

}  // namespace weave::detail::gemv
