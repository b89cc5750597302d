// weave::Communicator wraps an ncclComm_t (caller-owned or created here); SymmetricWindow is a
// block of NCCL symmetric memory every rank of the communicator can address (docs/comm.md).
//
// Threading: one Communicator per rank, each used by one host thread at a time. Several ranks in
// one process (one thread per GPU) or one process per GPU are both supported.
// Collective calls: every function marked "collective" must be called by every rank, in the
// same order; a rank that disagrees on configuration makes EVERY rank raise Error(kMismatch)
// (an all-gather of a configuration hash runs first), and a rank that never arrives makes the
// others raise Error(kTimeout) after timeout_s() instead of hanging.
// Errors: weave::Error (error.hpp) naming the rank, the call and the rule broken.
// NCCL release: weave compiles NCCL's device-API structures into its kernels, so the libnccl.so.2
// the process loaded (torch's own, when torch is there) must be the exact release weave was built
// against. Every factory below (wrap, adopt, create, create_local) checks this first and throws
// Error(kUnsupported) naming both versions and how to rebuild, before any GPU work; create and
// create_local then throw Error(kNoDevice) with no_gpu_reason() for a missing or non-Hopper GPU.
#pragma once
#include <nccl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weave/error.hpp"
#include "weave/export.hpp"
#include "weave/transport.hpp"
#include "weave/window_handle.hpp"
#include "weave/window_layout.hpp"

struct ncclDevComm;  // nccl_device.h; only device code needs its definition

namespace weave WEAVE_API {

struct CommOptions {
  // Anything else the ranks must agree on (a model name, a plan id): hashed into the check.
  std::string tag;
  // Limit for every bounded wait (flags, credits, host-side agreement). <= 0: the environment
  // variable WEAVE_COMM_TIMEOUT_S, else 10 s.
  double timeout_s = 0;
};

class Communicator {
 public:
  // Wraps `comm` (caller keeps ownership; it is never destroyed here). Collective.
  static std::unique_ptr<Communicator> wrap(ncclComm_t comm, const CommOptions& options = {});
  // Like wrap, but takes ownership: the communicator is destroyed (or aborted, if broken) here.
  static std::unique_ptr<Communicator> adopt(ncclComm_t comm, const CommOptions& options = {});
  // One process driving `devices` (rank i = devices[i]) through ncclCommInitAll; the per-rank
  // checks run on one thread per GPU internally. Use each returned rank from its own thread
  // (run_per_rank).
  static std::vector<std::unique_ptr<Communicator>> create_local(const std::vector<int>& devices,
                                                                 const CommOptions& options = {});
  // One rank of `world`, bootstrapped from `id` that the caller's launcher exchanged (MPI,
  // torchrun, unique_id_via_file). Binds `device`. Collective.
  static std::unique_ptr<Communicator> create(const ncclUniqueId& id, int rank, int world,
                                              int device, const CommOptions& options = {});
  static ncclUniqueId new_unique_id();

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const noexcept { return rank_; }
  int world_size() const noexcept { return world_; }
  int device() const noexcept { return device_; }
  ncclComm_t nccl() const noexcept { return comm_; }
  double timeout_s() const noexcept { return timeout_s_; }
  // Ranks this rank reaches with loads/stores (NCCL's LSA team); == world_size() when every rank
  // is in one NVLink domain, which the ce and lsa transports require.
  int lsa_team_size() const noexcept { return lsa_size_; }
  // Each transport on this communicator, whether it can run, and why not (compiled out, no peer
  // access, ranks outside one NVLink domain, ...). Local (not collective).
  std::vector<TransportAvailability> transports() const;
  // Throws Error(kUnavailable) naming the reason unless `t` can run here. Local.
  void require(Transport t) const;

  // Collective: all-gathers `hash`; if any rank's differs, every rank throws Error(kMismatch)
  // naming `what` and each rank's value.
  void agree(std::uint64_t hash, std::string_view what) const;
  // Collective: every rank reports whether a local step worked; if one did not, every rank
  // throws (that rank with `why`, the others naming the failing rank).
  void agree_ok(bool ok, std::string_view what, const std::string& why) const;
  // Collective: every rank's `value`, in rank order (bounded wait; `what` names the step).
  std::vector<std::uint64_t> all_gather(std::uint64_t value, std::string_view what) const;
  // Collective host barrier (a 4-byte NCCL all-reduce, waited on with the timeout).
  void barrier() const;
  // True after a host-side wait timed out: the NCCL communicator may be stuck; an owned one is
  // aborted (ncclCommAbort) rather than destroyed.
  bool broken() const noexcept { return broken_; }

 private:
  Communicator(ncclComm_t comm, bool owned, const CommOptions& options);
  void wait_stream(const char* what) const;  // bounded cudaStreamQuery loop
  void release() noexcept;
  ncclComm_t comm_ = nullptr;
  bool owned_ = false;
  int rank_ = 0, world_ = 1, device_ = 0, lsa_size_ = 1;
  double timeout_s_ = 10;
  cudaStream_t stream_ = nullptr;  // private stream for the agreement collectives
  void* scratch_ = nullptr;        // device scratch for them (world * 16 bytes)
  mutable bool broken_ = false;
  std::string tag_;
};

// Runs fn(comm) on one thread per rank (cudaSetDevice(comm.device()) first), joins them all and
// rethrows the lowest rank's error, if any. The ranks must fail symmetrically (the library's
// collective calls do), or the ones that did not fail block in their next collective.
void run_per_rank(const std::vector<std::unique_ptr<Communicator>>& comms,
                  const std::function<void(Communicator&)>& fn);

// A launcher helper for one process per GPU: rank 0 creates the id and writes it to `path`
// (write + rename, so readers never see half a file); the other ranks wait for it, at most
// `timeout_s` seconds (Error(kTimeout) naming the path).
ncclUniqueId unique_id_via_file(const std::string& path, int rank, double timeout_s);

// NCCL symmetric memory: ncclMemAlloc + ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) + an
// ncclDevComm with LSA barriers. Zeroed when created (then a barrier, so no rank ever sees stale
// flags). Destroyed in reverse order (ncclDevCommDestroy, ncclCommWindowDeregister,
// ncclMemFree), also when construction fails half-way. Creation and destruction are collective.
class SymmetricWindow {
 public:
  static constexpr int kLsaBarriers = 4;
  SymmetricWindow(Communicator& comm, WindowLayout layout);
  ~SymmetricWindow();
  SymmetricWindow(const SymmetricWindow&) = delete;
  SymmetricWindow& operator=(const SymmetricWindow&) = delete;

  Communicator& comm() const noexcept { return *comm_; }
  const WindowLayout& layout() const noexcept { return layout_; }
  std::size_t bytes() const noexcept { return bytes_; }
  char* local() const noexcept { return handle_.base[handle_.rank]; }
  // Rank `r`'s window as mapped on this rank's GPU (host table): a cudaMemcpyAsync destination.
  char* peer(int r) const;
  // Local pointer to a named region (Error(kInvalidArgument) if there is none).
  char* region(std::string_view name) const;
  // True when [p, p + bytes) lies inside the local window.
  bool contains(const void* p, std::size_t bytes) const noexcept;
  ncclWindow_t nccl_window() const noexcept { return handle_.nccl_window; }
  const ncclDevComm& dev_comm() const noexcept { return *dev_comm_; }
  const WindowHandle& handle() const noexcept { return handle_; }

 private:
  void release() noexcept;
  Communicator* comm_;
  WindowLayout layout_;
  std::size_t bytes_ = 0;
  void* mem_ = nullptr;
  ncclWindow_t win_ = nullptr;
  std::unique_ptr<ncclDevComm> dev_comm_;
  bool dev_comm_created_ = false;
  WindowHandle handle_{};
};

}  // namespace weave
