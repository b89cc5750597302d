// The state behind weave::Collective (internal): the resolved plan, the op's runtime (group,
// window, protocol words, error record; comm/op_runtime.hpp), its region offsets, and the ce
// transport's per-peer streams. Built on a comm::Group, so the same code runs over an NCCL
// communicator and in the test-only emulated world.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "comm/group.hpp"
#include "comm/kernels.hpp"
#include "comm/op_layout.hpp"
#include "comm/collective_hooks.hpp"
#include "comm/copy_streams.hpp"
#include "comm/op_runtime.hpp"
#include "comm/stream_mem_ops.hpp"
#include "weave/collectives.hpp"

namespace weave {

struct Collective::Impl {
  std::shared_ptr<comm::Group> owned_group;  // the Communicator's group (shared by ops of one window)
  comm::Group* group = nullptr;
  CollectiveConfig cfg;
  comm::CollectiveHooks hooks;  // the tests' negative controls (defaults everywhere else)
  CollectivePlan plan;
  size_t esz = 1;  // element bytes (1 for all-gather)
  int max_blocks = 1;
  comm::OpOffsets off;
  std::unique_ptr<Communicator> nccl_ce_comm;  // nccl-ce: a split with NCCL_CTA_POLICY_ZERO
  std::unique_ptr<comm::Group> nccl_ce_group;  // ... and its group (the window is made on it)
  std::unique_ptr<comm::OpRuntime> rt;
  comm::OpWindow* win = nullptr;               // rt's window (shared by every op of create_sharing_window)
  comm::Proto proto{};
  comm::CopyStreams copies;                    // ce: one copy stream per peer step
  std::unique_ptr<comm::StreamMemOps> mem_ops;  // ce pull: the copy streams wait on kernel-stored triggers
  uint64_t self_test_seed = 0x5eed;
  // Testing hook (the self-test's negative control, tests/gpu/test_emulated_controls.cu): the rank
  // whose self-test input holds the previous seed's values, as a transport that delivered a stale
  // call's data from that source would show. -1 (always, outside that test): none.
  int self_test_stale_source = -1;
  // Testing hook (tests/gpu/test_emulated_controls.cu): run() raises after its GPU work is enqueued,
  // as an error mid-enqueue would; the op must then be broken (CallGuard::enqueueing).
  bool fail_after_enqueue_for_testing = false;
  // The Impl of an op (tests reach the hook above through it).
  static Impl& of(Collective& op) { return *op.impl_; }

  // Construction in two steps, so several ops can share one window: the constructor validates,
  // plans and agrees (collective); shape() says which regions the op needs; attach() takes the
  // window holding them and initialises the op's control, credit and flag words (collective).
  Impl(comm::Group& g, const CollectiveConfig& config, const comm::CollectiveHooks& hooks = {});
  comm::OpShape shape() const;
  // The group windows of this op are made on (the nccl-ce split's for nccl-ce).
  comm::Group& window_group() const { return nccl_ce_group ? *nccl_ce_group : *group; }
  void attach(std::shared_ptr<comm::OpWindow> window, const comm::OpOffsets& offsets);
  ~Impl();
  void release() noexcept;

  // One op in a window of its own, on `g` (the Communicator constructor and the emulated world).
  static std::unique_ptr<Collective> create(comm::Group& g, const CollectiveConfig& config,
                                            const comm::CollectiveHooks& hooks = {});
  // The same on a Communicator's group, which the op keeps alive (the public constructor's body;
  // tools and multi-GPU tests that set hooks use it too).
  static std::unique_ptr<Collective> create(Communicator& comm, const CollectiveConfig& config,
                                            const comm::CollectiveHooks& hooks = {});
  // The public op around an attached Impl (weave::create_sharing_window builds them in steps).
  static std::unique_ptr<Collective> wrap(std::unique_ptr<Impl> impl);
  // Refuses (kInvalidArgument, naming `list`[i]) a config that cannot share a window: 'nccl-ce',
  // whose window belongs to its own communicator split.
  static void check_shareable(const std::vector<CollectiveConfig>& configs, const char* list);
  // Several ops sharing one window (Collective::create_sharing_window's body).
  static std::vector<std::unique_ptr<Collective>> create_sharing(comm::Group& g,
                                                                 const std::vector<CollectiveConfig>& configs);

  ncclComm_t nccl_comm() const;
  void check() const;
  // nccl transport: a call NCCL's symmetric kernels get wrong (see run_nccl), refused by run().
  bool nccl_symmetric_defect(const void* in, const void* out, size_t count) const;
  void run(const void* in, void* out, size_t count, cudaStream_t stream);

 private:
  void run_nccl(const void* in, void* out, size_t count, cudaStream_t stream);
  void run_lsa(const void* in, void* out, size_t count, cudaStream_t stream);
  void run_ce(const void* in, void* out, size_t count, cudaStream_t stream);
  void run_ce_pull_all_gather(const char* in, char* out, size_t bytes, cudaStream_t stream);
  uint64_t offset_of(const void* p) const { return win->offset_of(p); }
  // ce helpers: copies on the per-peer streams, forked from and joined into `stream`.
  // ce push: every write into a peer (gated; collective_ce.cpp, docs/memory_ordering.md "ce-gate").
  void ce_push(comm::CePut put, size_t sm, cudaStream_t stream);
  // docs/memory_ordering.md "zero-copy-offsets": where this call's zero-copy buffer sits in the
  // window, compared with every peer's on the device with the call's lag-0 handshake.
  static comm::ZeroCopyKey zero_copy_key(uint64_t offset, uint64_t stride) {
    return comm::ZeroCopyKey{.offset = offset, .stride = stride, .check = 1};
  }
};

}  // namespace weave
