// Decode GEMV kernels for mode ptpc: 1, 2 and 4 token tiles (M <= 8, 16, 32).
#include "gemv/gemv_launch.cuh"

namespace weave::detail::gemv {

void launch_ptpc(const KernelParams& p, const CUtensorMap& b_map, const Launch& l) {
  launch_mode<ScaleMode::kPtpc>(p, b_map, l);
}

}  // namespace weave::detail::gemv
