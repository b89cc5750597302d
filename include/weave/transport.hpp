// The transports that move bytes between GPUs, and whether each can run here. Requesting one that
// cannot (compiled out, no peer access, a peer outside the NVLink domain) is an error naming the
// reason; nothing ever reports success having moved no bytes (docs/design.md, "transports").
// Build note: the CMake options WEAVE_ENABLE_{NCCL_TRANSPORT,CE,LSA} become compile definitions
// (0/1) for sources under src/comm/ only; code elsewhere asks transport_availability().
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weave/export.hpp"

namespace weave WEAVE_API {

enum class Transport {
  kNccl,  // NCCL collectives (and NCCL's copy-engine collectives, NCCL_CTA_POLICY_ZERO)
  kCe,    // copy engines: cudaMemcpyAsync / cudaMemcpyBatchAsync to peer addresses
  kLsa,   // SM loads/stores to peers through the NCCL symmetric window (NVLink)
};

std::string_view to_string(Transport t) noexcept;
std::optional<Transport> parse_transport(std::string_view name) noexcept;  // "nccl", "ce", "lsa"

struct TransportAvailability {
  Transport transport;
  bool compiled_in = false;
  bool available = false;
  std::string reason;  // why not, or a short description of the path when available
};

// For the given CUDA ordinals (all ranks of one process), whether each transport can run.
std::vector<TransportAvailability> transport_availability(const std::vector<int>& devices);

// Throws weave::Error(kUnavailable) naming the reason unless `t` can run on `devices`.
void require_transport(Transport t, const std::vector<int>& devices);

}  // namespace weave
