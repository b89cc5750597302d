// Decode GEMV kernels of the stream path (bf16): 1, 2 and 4 token tiles (M <= 8, 16, 32).
#include "gemv/gemv_launch.cuh"
#include "gemv/gemv_stream_kernel.cuh"

namespace weave::detail::gemv {

void launch_stream_bf16(const KernelParams& p, const CUtensorMap& b_map, const CUtensorMap& a_map, const Launch& l) {
  switch (l.cfg.tiles) {
    case 1: return launch_clusters<gemv_stream_kernel<1>, kStreamThreads>(kMaxSmemBytesTmaWide, l, p, b_map, a_map);
    case 2: return launch_clusters<gemv_stream_kernel<2>, kStreamThreads>(kMaxSmemBytesTmaWide, l, p, b_map, a_map);
    case 4: return launch_clusters<gemv_stream_kernel<4>, kStreamThreads>(kMaxSmemBytesTmaWide, l, p, b_map, a_map);
    default:
      WEAVE_EXPECT(false, ::weave::Status::kInternal, "gemv stream: no kernel for " << l.cfg.tiles << " token tiles");
  }
}

}  // namespace weave::detail::gemv
