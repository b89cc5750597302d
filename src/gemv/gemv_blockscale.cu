// Decode GEMV kernels for mode blockscale: 1, 2 and 4 token tiles (M <= 8, 16, 32).
#include "gemv/gemv_launch.cuh"

namespace weave::detail::gemv {

void launch_blockscale(const KernelParams& p, const CUtensorMap& b_map, const Launch& l) {
  launch_mode<ScaleMode::kBlockscale>(p, b_map, l);
}

}  // namespace weave::detail::gemv
