#include <cuda_runtime.h>

// WEAVE_ENABLE_* are compile definitions given only to sources under src/comm/ (src/CMakeLists.txt).
#if !defined(WEAVE_ENABLE_CE) || !defined(WEAVE_ENABLE_LSA) || !defined(WEAVE_ENABLE_NCCL_TRANSPORT)
#error "transport switches missing: this file must live under src/comm/"
#endif

#include "common/check.hpp"
#include "comm/stream_mem_ops.hpp"
#include "comm/transport_build.hpp"
#include "weave/device.hpp"
#include "weave/transport.hpp"

namespace weave {

std::string_view to_string(Transport t) noexcept {
  switch (t) {
    case Transport::kNccl: return "nccl";
    case Transport::kCe: return "ce";
    case Transport::kLsa: return "lsa";
  }
  return "?";
}

std::optional<Transport> parse_transport(std::string_view name) noexcept {
  if (name == "nccl") return Transport::kNccl;
  if (name == "ce") return Transport::kCe;
  if (name == "lsa") return Transport::kLsa;
  return std::nullopt;
}

bool comm::transport_compiled_in(Transport t) {
  switch (t) {
    case Transport::kNccl: return WEAVE_ENABLE_NCCL_TRANSPORT;
    case Transport::kCe: return WEAVE_ENABLE_CE;
    case Transport::kLsa: return WEAVE_ENABLE_LSA;
  }
  return false;
}

namespace {

const char* cmake_option(Transport t) {
  switch (t) {
    case Transport::kNccl: return "WEAVE_ENABLE_NCCL_TRANSPORT";
    case Transport::kCe: return "WEAVE_ENABLE_CE";
    case Transport::kLsa: return "WEAVE_ENABLE_LSA";
  }
  return "?";
}

// Peer transports need every pair of devices to reach each other over NVLink-class P2P.
std::string peer_problem(const std::vector<int>& devices) {
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      PeerLink link = peer_link(a, b);
      if (!link.can_access)
        return "cuda:" + std::to_string(a) + " cannot access cuda:" + std::to_string(b) +
               " peer-to-peer (not in one NVLink domain)";
      if (!link.native_atomics)
        return "cuda:" + std::to_string(a) + " -> cuda:" + std::to_string(b) +
               " has no native P2P atomics (a PCIe path, not NVLink)";
    }
  return "";
}

// Whether every device supports stream memory operations (cuStreamWaitValue32 / WriteValue32),
// which the ce transport's device-triggered pull needs (the same check that op runs).
std::string stream_mem_ops(const std::vector<int>& devices) {
  for (int d : devices) {
    const std::string why = comm::StreamMemOps::unsupported_reason(d);
    if (!why.empty()) return "stream memory ops: " + why;
  }
  return "stream memory ops: supported (device-triggered copies: ce pull all-gather)";
}

}  // namespace

std::vector<TransportAvailability> transport_availability(const std::vector<int>& devices) {
  std::vector<TransportAvailability> out;
  const std::string gpu_problem = no_gpu_reason();
  for (Transport t : {Transport::kNccl, Transport::kCe, Transport::kLsa}) {
    TransportAvailability a{t, comm::transport_compiled_in(t), false, ""};
    if (!a.compiled_in) {
      a.reason = std::string("compiled out (built with -D") + cmake_option(t) + "=OFF)";
    } else if (!gpu_problem.empty()) {
      a.reason = gpu_problem;
    } else if (t == Transport::kNccl) {
      a.available = true;
      a.reason = "NCCL collectives";
    } else {
      std::string problem = peer_problem(devices);
      a.available = problem.empty();
      a.reason = a.available ? (t == Transport::kCe ? "copy engines to peer window addresses"
                                                    : "SM loads/stores through the symmetric window")
                             : problem;
      if (a.available && t == Transport::kCe) {
        const std::string ops = stream_mem_ops(devices);
        if (!ops.empty()) a.reason += "; " + ops;
      }
    }
    out.push_back(a);
  }
  return out;
}

void require_transport(Transport t, const std::vector<int>& devices) {
  for (const auto& a : transport_availability(devices)) {
    if (a.transport != t) continue;
    WEAVE_EXPECT(a.available, Status::kUnavailable,
                 "transport '" << to_string(t) << "' requested but unavailable: " << a.reason);
    return;
  }
}

}  // namespace weave
