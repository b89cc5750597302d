// Transport and algorithm selection (CPU only): what a collective would run, and why. The same
// function decides for Collective's constructor and prints for `weave plan comm`.
#include <sstream>

#include "common/check.hpp"
#include "weave/collectives.hpp"

namespace weave {

std::string_view to_string(CollectiveOp op) noexcept {
  switch (op) {
    case CollectiveOp::kAllGather: return "all-gather";
    case CollectiveOp::kReduceScatter: return "reduce-scatter";
    case CollectiveOp::kAllReduce: return "all-reduce";
  }
  return "?";
}

std::optional<CollectiveOp> parse_collective_op(std::string_view name) noexcept {
  if (name == "all-gather" || name == "allgather" || name == "ag") return CollectiveOp::kAllGather;
  if (name == "reduce-scatter" || name == "reducescatter" || name == "rs") return CollectiveOp::kReduceScatter;
  if (name == "all-reduce" || name == "allreduce" || name == "ar") return CollectiveOp::kAllReduce;
  return std::nullopt;
}

std::string_view to_string(Algorithm a) noexcept {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kPush: return "push";
    case Algorithm::kPull: return "pull";
    case Algorithm::kOneShot: return "one-shot";
    case Algorithm::kTwoShot: return "two-shot";
    case Algorithm::kNcclDefault: return "nccl";
    case Algorithm::kNcclCopyEngine: return "nccl-ce";
    case Algorithm::kLowLatency: return "ll";
  }
  return "?";
}

std::optional<Algorithm> parse_algorithm(std::string_view name) noexcept {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kPush, Algorithm::kPull, Algorithm::kOneShot, Algorithm::kTwoShot,
                      Algorithm::kNcclDefault, Algorithm::kNcclCopyEngine, Algorithm::kLowLatency})
    if (name == to_string(a)) return a;
  return std::nullopt;
}

namespace {

const char* option_of(Transport t) {
  switch (t) {
    case Transport::kNccl: return "WEAVE_ENABLE_NCCL_TRANSPORT";
    case Transport::kCe: return "WEAVE_ENABLE_CE";
    case Transport::kLsa: return "WEAVE_ENABLE_LSA";
  }
  return "?";
}

bool compiled(const PlanInputs& in, Transport t) {
  switch (t) {
    case Transport::kNccl: return in.compiled_nccl;
    case Transport::kCe: return in.compiled_ce;
    case Transport::kLsa: return in.compiled_lsa;
  }
  return false;
}

// "" when `t` can run for these inputs, else why not.
std::string why_not(const PlanInputs& in, Transport t) {
  if (!compiled(in, t))
    return std::string("compiled out (built with -D") + option_of(t) + "=OFF)";
  if (t == Transport::kNccl) return "";
  if (in.lsa_team_size != in.world)
    return "ranks not all in one NVLink domain (NCCL's load/store team has " + std::to_string(in.lsa_team_size) +
           " of " + std::to_string(in.world) + " ranks)";
  if (!in.peer_access) return "no peer-to-peer access between the GPUs";
  return "";
}

// Which algorithms each (op, transport) implements. kAuto stays kAuto over lsa (it picks ll for
// small calls, else push or one-/two-shot, per call by size) and for all-reduce over ce (one- or
// two-shot per call); it resolves to push for all-gather and reduce-scatter over ce.
Algorithm resolve(const PlanInputs& in, Transport t) {
  const Algorithm a = in.algorithm;
  std::ostringstream bad;
  bad << "algorithm '" << to_string(a) << "' is not implemented for " << to_string(in.op) << " over transport '"
      << to_string(t) << "'";
  if (t == Transport::kNccl) {
    if (a == Algorithm::kAuto || a == Algorithm::kNcclDefault) return Algorithm::kNcclDefault;
    WEAVE_EXPECT_ARG(a == Algorithm::kNcclCopyEngine && in.op == CollectiveOp::kAllGather,
                     bad.str() << " (nccl: 'nccl', or 'nccl-ce' for all-gather, where NCCL_CTA_POLICY_ZERO applies)");
    return a;
  }
  const bool lsa = t == Transport::kLsa;
  if (a == Algorithm::kLowLatency) {
    WEAVE_EXPECT_ARG(lsa, bad.str() << " (ll: lsa only)");
    return a;
  }
  switch (in.op) {
    case CollectiveOp::kAllGather:
      if (a == Algorithm::kAuto) return lsa ? Algorithm::kAuto : Algorithm::kPush;
      WEAVE_EXPECT_ARG(a == Algorithm::kPush || a == Algorithm::kPull,
                       bad.str() << " (all-gather: push, pull (ce: device-triggered); ll over lsa only)");
      return a;
    case CollectiveOp::kReduceScatter:
      if (a == Algorithm::kAuto) return lsa ? Algorithm::kAuto : Algorithm::kPush;
      WEAVE_EXPECT_ARG(a == Algorithm::kPush, bad.str() << " (reduce-scatter: push; ll over lsa only)");
      return a;
    case CollectiveOp::kAllReduce:
      WEAVE_EXPECT_ARG(a == Algorithm::kAuto || a == Algorithm::kOneShot || a == Algorithm::kTwoShot,
                       bad.str() << " (all-reduce: auto, one-shot, two-shot; ll over lsa only)");
      return a;
  }
  return a;
}

// Auto all-gather uses copy engines from this many bytes per rank: measured on 2 x H200
// (docs/perf/comm.md) SM pushes are 5-8% faster up to 32 MB per rank, the two are within 2% at
// 64 MB, and copy engines are faster above (and leave the SMs to the caller's kernels).
constexpr size_t kAutoCopyEngineAllGatherBytes = size_t(64) << 20;

// The preferred peer transport when the caller did not choose: copy engines for large
// all-gathers (they reach the NVLink peer-copy ceiling and leave the SMs free), SM kernels
// otherwise (lower latency, and reductions need SMs anyway). Copy engines there means the ce
// PULL (device-triggered copies): since the abort gate (docs/memory_ordering.md "ce-gate") the ce
// push writes into peers with an SM kernel, so it no longer frees the SMs; without stream memory
// ops (no pull) auto stays on lsa.
Transport preferred(const PlanInputs& in) {
  if (in.algorithm == Algorithm::kPull || in.algorithm == Algorithm::kLowLatency) return Transport::kLsa;
  if (in.op == CollectiveOp::kAllGather && in.bytes >= kAutoCopyEngineAllGatherBytes && in.stream_mem_ops &&
      in.algorithm == Algorithm::kAuto)
    return Transport::kCe;
  return Transport::kLsa;
}

}  // namespace

CollectivePlan plan_collective(const PlanInputs& in) {
  WEAVE_EXPECT_ARG(in.world >= 1 && in.world <= kMaxWorld, "world must be in 1.." << kMaxWorld << ", got " << in.world);
  WEAVE_EXPECT_ARG(in.lsa_team_size >= 1 && in.lsa_team_size <= in.world,
                   "lsa_team_size must be in 1..world, got " << in.lsa_team_size);
  CollectivePlan plan;
  if (in.transport) {
    const Transport t = *in.transport;
    const std::string why = why_not(in, t);
    WEAVE_EXPECT(why.empty(), Status::kUnavailable,
                 "transport '" << to_string(t) << "' requested for " << to_string(in.op)
                               << " but unavailable: " << why);
    plan.transport = t;
    plan.algorithm = resolve(in, t);
    plan.reason = "requested";
    return plan;
  }
  WEAVE_EXPECT_ARG(in.algorithm == Algorithm::kAuto || in.algorithm == Algorithm::kOneShot ||
                       in.algorithm == Algorithm::kTwoShot || in.algorithm == Algorithm::kPush ||
                       in.algorithm == Algorithm::kPull || in.algorithm == Algorithm::kLowLatency,
                   "algorithm '" << to_string(in.algorithm) << "' needs an explicit transport 'nccl'");
  const Transport first = preferred(in);
  const Transport second = first == Transport::kCe ? Transport::kLsa : Transport::kCe;
  std::string why_first = why_not(in, first);
  if (why_first.empty()) {
    plan.transport = first;
    plan.algorithm = first == Transport::kCe ? Algorithm::kPull : resolve(in, first);
    plan.reason = first == Transport::kCe
                      ? "auto: all-gather >= 64 MB per rank -> copy engines, pull (peer-copy ceiling, SMs free)"
                      : "auto: SM load/store kernels (lowest latency; reductions need SMs)";
    return plan;
  }
  // pull and ll exist over lsa only; do not "fall back" into an algorithm error.
  const bool lsa_only = in.algorithm == Algorithm::kPull || in.algorithm == Algorithm::kLowLatency;
  const bool second_ok = why_not(in, second).empty() && !(second == Transport::kCe && lsa_only);
  if (second_ok) {
    plan.transport = second;
    plan.algorithm = resolve(in, second);
    plan.fell_back = true;
    plan.reason = "auto: preferred transport '" + std::string(to_string(first)) + "' unavailable (" + why_first +
                  "); using '" + std::string(to_string(second)) + "'";
    return plan;
  }
  const std::string why_nccl = why_not(in, Transport::kNccl);
  WEAVE_EXPECT(why_nccl.empty(), Status::kUnavailable,
               "no transport can run " << to_string(in.op) << ": " << to_string(first) << ": " << why_first
                                       << "; nccl: " << why_nccl);
  plan.transport = Transport::kNccl;
  PlanInputs nccl_in = in;
  nccl_in.algorithm = Algorithm::kAuto;
  plan.algorithm = resolve(nccl_in, Transport::kNccl);
  plan.fell_back = true;
  plan.reason = "auto: falling back to NCCL because '" + std::string(to_string(first)) + "' is unavailable: " + why_first;
  return plan;
}

}  // namespace weave
