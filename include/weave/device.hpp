// Visible GPUs and what weave can do with them. Host-only; safe to call on machines without a
// driver (then list_devices() is empty and no_gpu_reason() says why).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "weave/export.hpp"

namespace weave WEAVE_API {

struct DeviceInfo {
  int ordinal = -1;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sms = 0;
  int64_t l2_bytes = 0;
  int64_t mem_bytes = 0;
  int max_smem_per_block_optin = 0;
  int sm_clock_mhz = 0;
  int mem_clock_mhz = 0;
  int mem_bus_bits = 0;
  std::string pci_bus_id;
  bool is_hopper() const { return cc_major == 9; }
};

std::vector<DeviceInfo> list_devices();
// "" when at least one Hopper GPU is visible; otherwise a sentence saying what is missing.
std::string no_gpu_reason();
// Throws weave::Error(kNoDevice) naming the device and what it is, unless `ordinal` is sm_90.
void require_hopper(int ordinal);

// Peer-to-peer view of two devices (from the CUDA runtime).
struct PeerLink {
  bool can_access = false;
  bool native_atomics = false;
  int performance_rank = -1;  // cudaDevP2PAttrPerformanceRank (lower is better)
};
PeerLink peer_link(int from, int to);

}  // namespace weave
