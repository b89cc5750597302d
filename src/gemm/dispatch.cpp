#include "gemm/dispatch.hpp"

#include <algorithm>
#include <cstring>

namespace weave::gemm {

static std::vector<GemmInstance>& registry() {
  static std::vector<GemmInstance> instances;
  return instances;
}

bool register_gemm_instance(const GemmInstance& instance) {
  auto& r = registry();
  r.push_back(instance);
  std::sort(r.begin(), r.end(),
            [](const GemmInstance& a, const GemmInstance& b) { return std::strcmp(a.name, b.name) < 0; });
  return true;
}

const std::vector<GemmInstance>& gemm_instances() { return registry(); }

const GemmInstance* find_gemm_instance(ScaleMode mode, DType out_dtype, EpilogueKind epilogue, int block_m,
                                       int block_n, ScaleLayout scale_layout) {
  for (const auto& i : registry())
    if (i.mode == mode && i.out_dtype == out_dtype && i.epilogue == epilogue && i.block_m == block_m &&
        i.block_n == block_n && i.scale_layout == scale_layout)
      return &i;
  return nullptr;
}

}  // namespace weave::gemm
