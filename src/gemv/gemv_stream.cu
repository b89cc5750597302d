// Decode GEMV kernels of the stream path (bf16): 1, 2 and 4 token tiles (M <= 8, 16, 32).
#include "gemv/gemv_launch.cuh"
#include "gemv/gemv_stream_kernel.cuh"

namespace weave::detail::gemv {

template <bool kPush>
void launch_stream(const KernelParams& p, const CUtensorMap& b_map, const CUtensorMap& a_map, const Launch& l) {
  switch (l.cfg.tiles) {
    case 1: return launch_clusters<gemv_stream_kernel<1, kPush>, kStreamThreads>(kMaxSmemBytesTmaWide, l, p, b_map, a_map);
    case 2: return launch_clusters<gemv_stream_kernel<2, kPush>, kStreamThreads>(kMaxSmemBytesTmaWide, l, p, b_map, a_map);
    case 4: return launch_clusters<gemv_stream_kernel<4, kPush>, kStreamThreads>(kMaxSmemBytesTmaWide, l, p, b_map, a_map);
    default:
      WEAVE_EXPECT(false, ::weave::Status::kInternal, "gemv stream: no kernel for " << l.cfg.tiles << " token tiles");
  }
}

void launch_stream_bf16(const KernelParams& p, const CUtensorMap& b_map, const CUtensorMap& a_map, const Launch& l) {
  if (l.cfg.push_reduce) launch_stream<true>(p, b_map, a_map, l);
  else launch_stream<false>(p, b_map, a_map, l);
}

}  // namespace weave::detail::gemv
