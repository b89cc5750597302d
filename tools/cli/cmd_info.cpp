// `weave info`: GPUs, SMs, L2, clocks, the P2P/NVLink matrix, NCCL version, transports and why
// any is unavailable. Works without a GPU (says so and exits 0: information, not a failure).
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>

#include "cli/commands.hpp"
#include "weave/device.hpp"
#include "weave/transport.hpp"
#include "weave/version.hpp"

namespace weave::cli {

static void print_info() {
  int driver = 0, runtime = 0, nccl = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  ncclGetVersion(&nccl);
  std::printf("weave %s\n", weave::version());
  std::printf("CUDA runtime %d.%d, driver %s, NCCL %d.%d.%d (built against %s)\n", runtime / 1000,
              (runtime % 1000) / 10,
              driver ? (std::to_string(driver / 1000) + "." + std::to_string((driver % 1000) / 10)).c_str()
                     : "none",
              nccl / 10000, (nccl % 10000) / 100, nccl % 100, WEAVE_NCCL_BUILD_VERSION);
  auto devices = list_devices();
  std::string why = no_gpu_reason();
  if (devices.empty()) {
    std::printf("GPUs: none. %s\n", why.c_str());
  } else {
    std::printf("GPUs: %zu\n", devices.size());
    std::printf("  %-4s %-22s %-5s %4s %7s %9s %8s %8s %s\n", "id", "name", "sm", "SMs", "L2 MB",
                "mem GiB", "SM MHz", "mem MHz", "pci");
    for (const auto& d : devices)
      std::printf("  %-4d %-22s %d.%-3d %4d %7.1f %9.1f %8d %8d %s\n", d.ordinal, d.name.c_str(),
                  d.cc_major, d.cc_minor, d.sms, d.l2_bytes / 1048576.0, d.mem_bytes / 1073741824.0,
                  d.sm_clock_mhz, d.mem_clock_mhz, d.pci_bus_id.c_str());
    if (!why.empty()) std::printf("  note: %s\n", why.c_str());
    if (devices.size() > 1) {
      std::printf("P2P matrix (A = access + native atomics (NVLink-class), P = access only, . = none):\n     ");
      for (const auto& b : devices) std::printf(" %3d", b.ordinal);
      std::printf("\n");
      for (const auto& a : devices) {
        std::printf("  %3d", a.ordinal);
        for (const auto& b : devices) {
          if (a.ordinal == b.ordinal) {
            std::printf("   -");
            continue;
          }
          PeerLink l = peer_link(a.ordinal, b.ordinal);
          std::printf("   %c", l.can_access ? (l.native_atomics ? 'A' : 'P') : '.');
        }
        std::printf("\n");
      }
    }
  }
  std::vector<int> ordinals;
  for (const auto& d : devices) ordinals.push_back(d.ordinal);
  std::printf("Transports (over %zu device(s)):\n", ordinals.size());
  for (const auto& t : transport_availability(ordinals))
    std::printf("  %-5s %-11s %s\n", std::string(to_string(t.transport)).c_str(),
                t.available ? "available" : "unavailable", t.reason.c_str());
}

void add_info_command(CLI::App& app) {
  auto* info = app.add_subcommand(
      "info", "Show GPUs (SMs, L2, clocks), the P2P/NVLink matrix, CUDA/NCCL versions and "
              "which transports can run here, with the reason for each that cannot.");
  info->callback([] { print_info(); });
}

}  // namespace weave::cli
