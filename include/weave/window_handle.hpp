// The by-value device handle of a SymmetricWindow: plain pointers a kernel needs to address every
// rank's copy of the window. Trivially copyable, so it is passed to kernels as an argument (no
// device-side indirection). Host-only header; the kernels that read it live in src/comm/.
//
// Ownership: the SymmetricWindow owns the memory; a handle is valid while that window lives.
// base[r] is rank r's window as mapped on THIS rank's GPU (NCCL's LSA mapping), so it may be
// used by SM loads/stores and as a cudaMemcpyAsync destination on this rank's device only.
#pragma once
#include <nccl.h>

#include <cstdint>
#include <type_traits>

#include "weave/export.hpp"

namespace weave WEAVE_API {

inline constexpr int kMaxWorld = 8;  // one NVLink domain of H100/H200 (HGX): 8 GPUs

struct WindowHandle {
  int rank = 0;
  int world = 1;
  std::uint64_t bytes = 0;
  char* base[kMaxWorld] = {};  // base[rank] is the local window; nullptr for ranks not mapped
  ncclWindow_t nccl_window = nullptr;
};

static_assert(std::is_trivially_copyable_v<WindowHandle>, "WindowHandle is passed to kernels by value");

}  // namespace weave
