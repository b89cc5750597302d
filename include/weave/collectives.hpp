// All-gather, reduce-scatter and all-reduce over the nccl, ce and lsa transports (docs/comm.md).
//
// Verbs (the same on every op): construct (collective: allocates the op's symmetric window and
// checks that every rank asked for the same op), run(stream) (enqueues only: no allocation, no
// host sync, graph-capturable), self_test() (collective: moves known per-rank values through the
// real path and checks what arrived from each rank), check() (raises a recorded device error).
//
// Buffers: in/out may be any device memory of this rank's GPU. When they lie in the op's window
// (window_input() / window_output(), at the SAME offset on every rank, as NCCL's symmetric
// buffers must) the transfer is zero-copy; otherwise the op stages through its window. Each call
// checks the offsets on the device: a rank whose zero-copy buffer sits elsewhere stores nothing
// into peers and check()/run() raise Error(kMismatch) on every rank (the op is unusable after).
// In-place: all-gather in == out + rank * bytes; reduce-scatter in + rank * count == out;
// all-reduce in == out.
// Results: reductions sum in fp32 in rank order 0..world-1 on the rank that owns each element, so
// every rank's output is bitwise identical (nccl transport: NCCL's own order and precision).
// Ordering: a call's output is complete, and visible to later work on `stream`, when the call
// completes in stream order (docs/memory_ordering.md, "consume-acquire", "ce-completion").
// Flow control: a rank a call ahead never overwrites a buffer a slower rank still reads (per-peer
// call-epoch credits, docs/memory_ordering.md "credit"). Every wait is bounded by the
// communicator's timeout; a timed-out wait records (rank, peer, flag, expected, seen) and the next
// check()/run()/self_test() raises Error(kTimeout) with them. After that the op is unusable.
// Lifetime: construct and destroy ops in the same order on every rank.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weave/communicator.hpp"
#include "weave/export.hpp"
#include "weave/transport.hpp"
#include "weave/types.hpp"

namespace weave WEAVE_API {

enum class CollectiveOp : uint8_t { kAllGather, kReduceScatter, kAllReduce };
std::string_view to_string(CollectiveOp op) noexcept;
std::optional<CollectiveOp> parse_collective_op(std::string_view name) noexcept;  // "all-gather", ...

enum class Algorithm : uint8_t {
  kAuto,          // lsa: ll for small calls, else push (all-gather, reduce-scatter) or one-/two-shot
  kPush,           // lsa/ce: write into the receivers' windows (all-gather, reduce-scatter)
  kPull,           // lsa: read from the senders' windows (all-gather)
  kOneShot,        // all-reduce: every rank receives every input and reduces all of it
  kTwoShot,        // all-reduce: reduce-scatter to the owner, then all-gather of the sums
  kNcclDefault,    // nccl: NCCL's kernels
  kNcclCopyEngine, // nccl: NCCL_CTA_POLICY_ZERO (copy-engine collectives) on window buffers
  kLowLatency,     // lsa: flag-in-data lines, one kernel, no fence (small calls; twice the bytes)
};
std::string_view to_string(Algorithm a) noexcept;
std::optional<Algorithm> parse_algorithm(std::string_view name) noexcept;

struct CollectiveConfig {
  CollectiveOp op = CollectiveOp::kAllGather;
  std::optional<Transport> transport;  // nullopt: choose (plan_collective); explicit: raise if unavailable
  Algorithm algorithm = Algorithm::kAuto;
  DType dtype = DType::kBF16;          // reductions: kBF16 or kF32 (fp32 accumulation); all-gather: ignored
  // Largest call: all-gather bytes per rank; reduce-scatter output elements per rank; all-reduce
  // elements. Sizes the window; run() refuses larger calls.
  std::size_t max_count = 0;
  // ce all-gather: fraction of each rank's block stored to the peers by SM kernels while the copy
  // engines move the rest (0 = copy engines only). In [0, 0.9]. It takes effect only on the ungated
  // copy-engine path, a testing hook (internal header): by default the ce push writes into peers
  // with a gated SM kernel (docs/memory_ordering.md "ce-gate").
  double ce_sm_share = 0;
  // (Testing hooks, the negative controls among them, live in an internal header, not here.)
};

// What a collective would run and why (CPU only; weave plan comm prints it).
struct CollectivePlan {
  Transport transport = Transport::kNccl;
  Algorithm algorithm = Algorithm::kNcclDefault;
  bool fell_back = false;  // an auto choice that could not use its preferred transport
  std::string reason;
};
struct PlanInputs {
  CollectiveOp op = CollectiveOp::kAllGather;
  std::size_t bytes = 0;   // all-gather: per rank; reduce-scatter: per rank output; all-reduce: total
  int world = 2;
  int lsa_team_size = 2;   // ranks in one NVLink domain with this one
  bool compiled_nccl = true, compiled_ce = true, compiled_lsa = true;
  bool peer_access = true;
  bool stream_mem_ops = true;  // the device runs cuStreamWaitValue32 (the ce pull's triggers)
  std::optional<Transport> transport;  // requested; nullopt = auto
  Algorithm algorithm = Algorithm::kAuto;
};
// Throws Error(kUnavailable) when an explicitly requested transport cannot run (reason in the
// message) and Error(kInvalidArgument) for an algorithm the op/transport does not implement.
CollectivePlan plan_collective(const PlanInputs& in);

struct SelfTestReport {
  bool ok = false;                 // every pass on every rank
  bool caller_buffers_ok = false;  // this rank, the pass on cudaMalloc buffers
  bool window_buffers_ok = false;  // this rank, the pass on the op's window buffers (zero-copy)
  std::vector<std::int64_t> wrong_from_rank;  // elements (bytes for all-gather) wrong, per source rank
  std::string detail;                         // first mismatch, or what was checked
};

class Collective {
 public:
  // Collective. Validates the config (Error(kInvalidArgument) naming the field), resolves the
  // transport (auto: see plan_collective; a fallback logs one WEAVE_LOG line saying why), checks
  // all ranks agree (kMismatch) and creates the op's window.
  Collective(Communicator& comm, const CollectiveConfig& config);
  // Collective. Several ops in ONE symmetric window (one allocation, registration and device
  // communicator for all): op i owns the regions "op<i>.*" (docs/comm.md, "window layout"), so
  // they never alias, and the ops may run in any interleaving on one stream. Same validation and
  // errors as the constructor; 'nccl-ce' is refused (its window belongs to its own communicator
  // split). The window lives until the last of the returned ops is destroyed.
  static std::vector<std::unique_ptr<Collective>> create_sharing_window(Communicator& comm,
                                                                        const std::vector<CollectiveConfig>& configs);
  ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  const CollectiveConfig& config() const noexcept;
  Transport transport() const noexcept;
  Algorithm algorithm() const noexcept;
  std::string describe() const;  // "all-reduce bf16 lsa one-shot, window 12 MB, credits on"

  // Contract: one host thread at a time per op (a second thread inside run() of the same op raises
  // kInvalidArgument). Calls must run in host order (an op's epoch and election counter advance on
  // the device per call; two ops waiting on peers at once can deadlock): weave keeps every op of
  // a rank (all ops on one communicator) in host order across streams, a call on another stream
  // than the rank's previous call waiting for it on the GPU (an event; no host sync). Calls
  // captured into CUDA graphs are not ordered that way (the graph's order applies); ranks must
  // issue their ops in the same order. PDL: the first kernel of a call
  // lets the next grid launch early and waits (griddepcontrol.wait) for the previous one, so a
  // kernel launched between two calls with programmatic serialization must itself execute
  // griddepcontrol.wait before touching the op's buffers (every weave kernel does).
  // Enqueues one call on `stream`. count: all-gather bytes per rank, reduce-scatter output
  // elements per rank, all-reduce elements (1 .. max_count). Raises a device error recorded by
  // an earlier call (check()) before enqueueing.
  void run(const void* in, void* out, std::size_t count, cudaStream_t stream);

  // Zero-copy buffers inside the window (null for the nccl default algorithm, which needs none):
  // input: all-gather max_count bytes, reduce-scatter world*max_count elems, all-reduce max_count
  // elems; output: all-gather world*max_count bytes, reduce-scatter max_count, all-reduce max_count.
  void* window_input() const noexcept;
  void* window_output() const noexcept;
  // Rank `r`'s window_output() as mapped on this rank's GPU (a copy-engine destination; used by
  // the benchmark's peer-copy ceiling). Error(kUnavailable) if r's window is not mapped here.
  void* peer_window_output(int r) const;
  // The symmetric window holding this op's regions (shared with the other ops of
  // create_sharing_window).
  // Error(kUnavailable) for an op that is not on an NCCL window (the test-only emulated world).
  const SymmetricWindow& window() const;

  // Raises Error(kTimeout) with (rank, peer, flag, expected, seen) if a device wait timed out.
  // Does not synchronize: call after the stream work of interest has completed.
  void check() const;

  // Collective and synchronizing: moves known per-rank values (count elements, both through
  // caller-style buffers and through the window buffers) and checks each source rank's share.
  SelfTestReport self_test(std::size_t count = 0);
  // self_test(), raising Error(kInternal) with the report when it fails.
  void require_self_test(std::size_t count = 0);

  struct Impl;

 private:
  friend struct Impl;
  explicit Collective(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weave
