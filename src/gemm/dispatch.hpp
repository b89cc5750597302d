// The one table from (mode, output dtype, epilogue, tile) to a compiled kernel instance. Each
// src/gemm/instances/*.cu file registers exactly one entry at load time (no device work), so a
// build narrowed with -DWEAVE_GEMM_KERNELS lists only what it compiled, and the planner only
// chooses among instances that exist.
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "gemm/kernel_args.hpp"
#include "weave/types.hpp"

namespace weave::gemm {

enum class EpilogueKind { kStoreLocal };

struct GemmInstance {
  const char* name = "";  // e.g. "sm90_gemm_bf16_bf16_store_128x256x64"
  ScaleMode mode = ScaleMode::kBF16;
  ScaleLayout scale_layout = ScaleLayout::kRaw;  // mxfp8: the scale layout it reads; kRaw otherwise
  DType out_dtype = DType::kBF16;
  EpilogueKind epilogue = EpilogueKind::kStoreLocal;
  int block_m = 0, block_n = 0, block_k = 0;
  int stages = 0;
  int threads = 0;
  int smem_bytes = 0;
  // Raises the kernel's dynamic shared-memory limit on the current device (host call, no GPU work;
  // done once per Gemm construction, never in run()).
  void (*prepare)() = nullptr;
  // Enqueues the kernel with `grid` persistent CTAs.
  void (*launch)(const LocalKernelArgs& args, int grid, cudaStream_t stream) = nullptr;
};

// Every registered instance (stable order: by name).
const std::vector<GemmInstance>& gemm_instances();
// nullptr if no such instance was built.
const GemmInstance* find_gemm_instance(ScaleMode mode, DType out_dtype, EpilogueKind epilogue, int block_m,
                                       int block_n, ScaleLayout scale_layout = ScaleLayout::kRaw);
bool register_gemm_instance(const GemmInstance& instance);

}  // namespace weave::gemm
