#include "gemm/dispatch.hpp"

namespace weave::gemm {

const std::vector<GemmInstance>& gemm_instances() { return gemm_kernel_table<StoreLocalParams>(); }

const GemmInstance* find_gemm_instance(ScaleMode mode, DType out_dtype, EpilogueKind epilogue, int block_m,
                                       int block_n, ScaleLayout scale_layout, int cluster_m) {
  return find_gemm_kernel<StoreLocalParams>(mode, out_dtype, epilogue, block_m, block_n, scale_layout,
                                            SchedulerKind::kGroupedRows, cluster_m);
}

}  // namespace weave::gemm
