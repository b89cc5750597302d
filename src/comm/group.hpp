// The ranks an op runs on, as the op runtime sees them (internal): identity, bounded host-side
// agreement, and a window allocator whose memory every rank can address. Two kinds exist:
//   - an NCCL communicator (nccl_group: weave::Communicator and SymmetricWindow underneath), the
//     only kind a user can reach;
//   - the test-only emulated world (tests/support/emulated_world): W ranks as W host threads on
//     ONE GPU, W plain allocations on that GPU, the same WindowHandle filled with their
//     addresses, the same kernels. It exercises every protocol path except NCCL itself and
//     NVLink's memory model.
// Every op (Collective, the fused operators) is built on a Group, so both kinds run the same code.
#pragma once
#include "common/nccl_header_check.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weave/window_handle.hpp"
#include "weave/window_layout.hpp"

namespace weave {
class Communicator;
class SymmetricWindow;
}  // namespace weave

namespace weave::comm {

// A window every rank of a group has, with identical layout. Destroying it is local (the
// allocator makes sure no kernel still uses the memory).
class OpWindow {
 public:
  virtual ~OpWindow() = default;
  const WindowHandle& handle() const noexcept { return handle_; }
  const WindowLayout& layout() const noexcept { return layout_; }
  std::size_t bytes() const noexcept { return handle_.bytes; }
  char* local() const noexcept { return handle_.base[handle_.rank]; }
  // Rank r's window as mapped here (Error(kUnavailable) when it is not mapped).
  char* peer(int r) const;
  bool contains(const void* p, std::size_t bytes) const noexcept;
  std::uint64_t offset_of(const void* p) const noexcept {
    return static_cast<std::uint64_t>(static_cast<const char*>(p) - local());
  }
  // The NCCL symmetric window behind it; null in the emulated world.
  virtual const SymmetricWindow* symmetric() const noexcept { return nullptr; }

 protected:
  WindowHandle handle_{};
  WindowLayout layout_;
};

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const noexcept = 0;
  virtual int world_size() const noexcept = 0;
  virtual int device() const noexcept = 0;
  virtual double timeout_s() const noexcept = 0;
  // Ranks this rank reaches with loads and stores (== world_size() in one NVLink domain).
  virtual int lsa_team_size() const noexcept = 0;
  // Ranks whose kernels share this rank's GPU (1 with NCCL; W in the emulated world): a kernel
  // that relies on every rank's CTAs being resident together sizes its grid by SMs / this.
  virtual int ranks_per_device() const noexcept { return 1; }
  // The NCCL communicator (null in the emulated world: the nccl transport is unavailable there).
  virtual Communicator* communicator() const noexcept { return nullptr; }
  // Names this rank for comm/call_order.hpp (the calls of every op on it are kept in host order
  // across streams): ops built on one communicator share it.
  virtual const void* call_order_key() const noexcept { return this; }
  // Called by an op between enqueueing a kernel that waits for its peers and enqueueing, on other
  // streams, work that waits for that kernel (GemmAllGather fused-ce's pulls and join). Where
  // ranks share one GPU's hardware queues (the emulated world) it holds this rank until every rank
  // has made the same number of these calls, so no rank's waiting work can enter a queue ahead of
  // a peer's kernel (testing/emulated_world.hpp "Queues"); bounded by timeout_s(), and it
  // never fails (past the bound the op goes on, and its own bounded waits report). No-op with NCCL.
  virtual void enqueue_lockstep() const {}
  ncclComm_t nccl() const noexcept;
  virtual std::string describe() const = 0;  // "nccl rank 1/2 on GPU 1", "emulated rank 1/4 on GPU 0"

  // Collective, bounded by timeout_s(): every rank's value, in rank order.
  virtual std::vector<std::uint64_t> all_gather(std::uint64_t value, std::string_view what) const = 0;
  virtual void barrier() const = 0;
  // Collective: a zeroed window of `layout` on every rank (layouts agreed first: kMismatch).
  virtual std::shared_ptr<OpWindow> make_window(WindowLayout layout) = 0;

  // Collective checks on top of all_gather (the messages of Communicator::agree / agree_ok).
  void agree(std::uint64_t hash, std::string_view what) const;
  void agree_ok(bool ok, std::string_view what, const std::string& why) const;
  // Collective: the ranks whose `ok` is false ("1,3"), "" when every rank's is true (self-tests
  // report them instead of raising).
  std::string failed_ranks(bool ok, std::string_view what) const;
};

// The Group of a Communicator (which must outlive it); windows are SymmetricWindows.
std::unique_ptr<Group> nccl_group(Communicator& comm);

// The checks behind agree / agree_ok, given every rank's value (shared with Communicator).
void check_agreement(const std::vector<std::uint64_t>& hashes, int rank, std::string_view what);
void check_outcomes(const std::vector<std::uint64_t>& oks, bool ok, int rank, std::string_view what,
                    const std::string& why);

}  // namespace weave::comm
