// The emulated world (tests and benchmarks only, never a transport a user can select): W ranks
// as W host threads driving ONE GPU. Each rank is a comm::Group whose windows are plain
// allocations on that GPU; the WindowHandle every kernel receives holds all W ranks' addresses,
// exactly as an NCCL symmetric window's handle holds the peers' NVLink mappings. So the op code
// and its kernels are the same as over NCCL; what is not exercised is NCCL itself and NVLink's
// memory model (peer stores here are local L2 traffic, and take far less time).
//
// Residency: kernels that wait on peers need every rank's CTAs resident together. Ops size grids
// by SMs / Group::ranks_per_device() - 1 (ranks_per_device() = W here), so W grids fit the GPU at
// once with an SM to spare for the short kernels around calls (docs/memory_ordering.md "residency").
//
// Hardware queues: the W ranks' streams (W x (1 + peer copy streams) for the ce transport) share
// the GPU's connections, CUDA_DEVICE_MAX_CONNECTIONS (default 8, at most 32; the test binaries set
// 32 before CUDA starts). Streams that share a queue serialise, so a rank's kernel that waits for
// a peer can block that peer's work queued behind it: a false dependency a real multi-GPU run
// does not have. queue_budget_ok(streams) says whether `streams` streams fit; tests skip (and say
// so) the combinations that do not fit, e.g. the ce transport at W = 8 (64 streams).
//
// Queues, the rule the tests follow (lockstep enqueue): no rank enqueues a command that waits for
// its peer-dependent kernel (a copy of the output, a check kernel, the next call) until every rank
// has enqueued its own peer-dependent kernel of that call (a host barrier right after run(); the
// GPU is not synchronised). A queue is FIFO across the streams mapped to it: [rank 0's call, rank
// 0's copy of its output, rank 1's call] holds rank 1's call behind a copy that waits for rank 0's
// call, which waits for rank 1. Seen on the device before the rule (2026-12-01, W = 4, about one
// test run in four, also with 32 connections): a rank's fused kernel started only once a peer's
// wait had timed out (two timeouts in sequence, 10 s apart). Self-tests follow it by construction
// (nothing is enqueued after the call before the host sync). A multi-GPU run has no shared queue.
// Inside one call, an op whose call is a kernel plus work on other streams that waits for it
// (GemmAllGather fused-ce: copy streams waiting on its trigger words, then the join) follows the
// same rule through comm::Group::enqueue_lockstep, which these ranks implement as a bounded
// count-and-wait between the kernel's launch and the rest (a no-op over NCCL). GemmAllReduce
// fused-ce, whose kernels also wait for their copies, adds a second lockstep between the copies
// and the join. It orders eager enqueues only: a replayed graph's work enters the queues as the
// driver schedules it (GemmAllReduce fused-ce's graph test captures every rank into one graph).
//
// Host-side agreement (all_gather, barrier, window creation) is a rendezvous of the W threads,
// bounded by the timeout: a rank that never arrives makes the others raise Error(kTimeout)
// naming the step and the missing ranks.
#pragma once
#include <functional>
#include <string>
#include <memory>
#include <vector>

#include "comm/group.hpp"

namespace weave::bench {

class EmulatedWorld {
 public:
  // W ranks (1..kMaxWorld) on `device`; timeout_s bounds every device wait (the group's timeout)
  // and, unless rendezvous_timeout_s > 0 bounds them instead, every host rendezvous. A test whose
  // device timeout is shorter than a rank's deliberately slow call needs the longer rendezvous.
  EmulatedWorld(int world, int device = 0, double timeout_s = 10, double rendezvous_timeout_s = 0);
  ~EmulatedWorld();
  EmulatedWorld(const EmulatedWorld&) = delete;
  EmulatedWorld& operator=(const EmulatedWorld&) = delete;

  int world_size() const noexcept { return world_; }
  // True when `streams` streams (all ranks together) fit the hardware queues of this process
  // (CUDA_DEVICE_MAX_CONNECTIONS, default 8), so none shares a queue.
  static bool queue_budget_ok(int streams);
  static int hardware_queues();
  // "" when copy-engine transports (one copy stream per peer on every rank, kernels waiting on
  // peers) can run in a world of `world` ranks here, else why not: only W <= 2, since at W = 4 the
  // ranks' copy streams were seen to queue behind a peer's waiting kernel (a ce all-reduce timed
  // out once in a full test-binary run; docs/memory_ordering.md "residency").
  static std::string copy_engine_unsupported_reason(int world);
  comm::Group& rank(int r) const;

  // Runs fn(group) on one thread per rank (cudaSetDevice first), joins them and rethrows the
  // lowest rank's error. Ranks must fail symmetrically, or the others time out in their next
  // rendezvous (bounded).
  void run(const std::function<void(comm::Group&)>& fn) const;

  struct Shared;  // the rendezvous state (emulated_world.cpp)

 private:
  int world_;
  std::shared_ptr<Shared> shared_;
  std::vector<std::unique_ptr<comm::Group>> ranks_;
};

}  // namespace weave::bench
