// The launcher shared by the per-mode translation units: picks the token-tile instantiation and
// enqueues one cluster launch (optionally with programmatic dependent launch), or asks the device
// how many such clusters it holds at once (Launch::max_active_clusters).
#pragma once
#include <array>
#include <atomic>

#include "common/check.hpp"
#include "gemv/gemv_kernel.cuh"
#include "hopper/pdl_attribute.hpp"

namespace weave::detail::gemv {

// Launches kKernel (a GEMV kernel of either epilogue) on l.cfg's grid (split, n_blocks) in clusters
// of `split`, with programmatic dependent launch where l.pdl; or, with l.max_active_clusters set,
// writes how many such clusters the device holds at once instead.
template <auto kKernel, int kBlockThreads = kThreads, typename... Args>
void launch_clusters(int max_smem_bytes, const Launch& l, const Args&... args) {
  const GemvConfig& cfg = l.cfg;
  // Function attributes are per device; setting them is idempotent, so a race only repeats it.
  static std::array<std::atomic<bool>, 64> configured{};
  int device = 0;
  WEAVE_CHECK_CUDA(cudaGetDevice(&device));
  if (device < 0 || device >= 64 || !configured[device].load(std::memory_order_acquire)) {
    WEAVE_CHECK_CUDA(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem_bytes));
    WEAVE_CHECK_CUDA(cudaFuncSetAttribute(kKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    if (device >= 0 && device < 64) configured[device].store(true, std::memory_order_release);
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(cfg.split), static_cast<unsigned>(cfg.n_blocks), 1);
  config.blockDim = dim3(kBlockThreads, 1, 1);
  config.dynamicSmemBytes = static_cast<size_t>(cfg.smem_bytes);
  config.stream = l.stream;
  if (l.max_active_clusters != nullptr) {  // a residency query, not a launch
    cudaLaunchAttribute cluster = {};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim = {static_cast<unsigned>(cfg.split), 1, 1};
    config.attrs = &cluster;
    config.numAttrs = 1;
    WEAVE_CHECK_CUDA(cudaOccupancyMaxActiveClusters(l.max_active_clusters, kKernel, &config));
    return;
  }
  cudaLaunchAttribute attrs[2] = {};
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = static_cast<unsigned>(cfg.split);
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  attrs[1] = hopper::programmatic_serialization_attribute();
  config.attrs = attrs;
  config.numAttrs = l.pdl ? 2 : 1;
  WEAVE_CHECK_CUDA(cudaLaunchKernelEx(&config, kKernel, args...));
  WEAVE_CHECK_LAUNCH();
}

template <ScaleMode kMode, int kTiles, WeightPath kPath, int kDepth = 0>
void launch_tiles(const KernelParams& p, const CUtensorMap& b_map, const Launch& l) {
  launch_clusters<gemv_kernel<kMode, kTiles, kPath, kDepth>>(
      kPath == WeightPath::kTma ? kMaxSmemBytesTmaWide : kMaxSmemBytes, l, p, b_map);
}

// One token tile on the registers path also has the other depth (4 <-> 8) as an instance of its
// own, for the diagnostic GemvConfig::depth (WEAVE_GEMV_PATH=registers:D).
template <ScaleMode kMode, WeightPath kPath>
void launch_one_tile(const KernelParams& p, const CUtensorMap& b_map, const Launch& l) {
  constexpr int kOther = in_flight_steps(kMode, 1) == 8 ? 4 : 8;
  if constexpr (kPath == WeightPath::kRegisters) {
    if (l.cfg.depth == kOther) return launch_tiles<kMode, 1, kPath, kOther>(p, b_map, l);
  }
  launch_tiles<kMode, 1, kPath>(p, b_map, l);
}

template <ScaleMode kMode, WeightPath kPath>
void launch_path(const KernelParams& p, const CUtensorMap& b_map, const Launch& l) {
  switch (l.cfg.tiles) {
    case 1: launch_one_tile<kMode, kPath>(p, b_map, l); break;
    case 2: launch_tiles<kMode, 2, kPath>(p, b_map, l); break;
    case 4: launch_tiles<kMode, 4, kPath>(p, b_map, l); break;
    default:
      WEAVE_EXPECT(false, ::weave::Status::kInternal, "gemv: no kernel for " << l.cfg.tiles << " token tiles");
  }
}

template <ScaleMode kMode>
void launch_mode(const KernelParams& p, const CUtensorMap& b_map, const Launch& l) {
  if (l.path == WeightPath::kTma) launch_path<kMode, WeightPath::kTma>(p, b_map, l);
  else launch_path<kMode, WeightPath::kRegisters>(p, b_map, l);
}

}  // namespace weave::detail::gemv
