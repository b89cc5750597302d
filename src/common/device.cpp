#include "weave/device.hpp"

#include <cuda_runtime.h>

#include "common/check.hpp"

namespace weave {

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> out;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return out;
  }
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    DeviceInfo info;
    info.ordinal = d;
    info.name = p.name;
    info.cc_major = p.major;
    info.cc_minor = p.minor;
    info.sms = p.multiProcessorCount;
    info.l2_bytes = p.l2CacheSize;
    info.mem_bytes = static_cast<int64_t>(p.totalGlobalMem);
    info.max_smem_per_block_optin = static_cast<int>(p.sharedMemPerBlockOptin);
    int khz = 0;
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, d);
    info.sm_clock_mhz = khz / 1000;
    cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, d);
    info.mem_clock_mhz = khz / 1000;
    cudaDeviceGetAttribute(&info.mem_bus_bits, cudaDevAttrGlobalMemoryBusWidth, d);
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), d) == cudaSuccess) info.pci_bus_id = bus;
    out.push_back(info);
  }
  return out;
}

std::string no_gpu_reason() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA GPU is visible (") + cudaGetErrorName(err) +
           "): weave needs an NVIDIA Hopper GPU (H100/H200, sm_90) with a CUDA 13 driver";
  }
  for (const auto& d : list_devices())
    if (d.is_hopper()) return "";
  return "none of the " + std::to_string(n) +
         " visible CUDA GPU(s) is a Hopper GPU (sm_90); weave's kernels need H100/H200";
}

void require_hopper(int ordinal) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    throw Error(Status::kNoDevice, "cudaGetDeviceCount", WEAVE_LOCATION, no_gpu_reason());
  }
  WEAVE_EXPECT(ordinal >= 0 && ordinal < n, Status::kNoDevice,
               "device cuda:" << ordinal << " does not exist (" << n << " visible)");
  int major = 0, minor = 0;
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal));
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal));
  WEAVE_EXPECT(major == 9, Status::kNoDevice,
               "device cuda:" << ordinal << " is sm_" << major << minor
                              << "; weave's kernels are built for Hopper (sm_90a) only");
}

PeerLink peer_link(int from, int to) {
  PeerLink link;
  int v = 0;
  if (cudaDeviceCanAccessPeer(&v, from, to) == cudaSuccess) link.can_access = v != 0;
  if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrNativeAtomicSupported, from, to) == cudaSuccess)
    link.native_atomics = v != 0;
  if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrPerformanceRank, from, to) == cudaSuccess)
    link.performance_rank = v;
  cudaGetLastError();
  return link;
}

}  // namespace weave
