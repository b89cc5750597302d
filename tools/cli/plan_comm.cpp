// `weave plan comm`: which transport and algorithm a collective would use for a size and world,
// and why (the same plan_collective() the Collective constructor runs), plus the window it would
// allocate and what each call does. Pure planning: runs on a machine without a GPU.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/args.hpp"
#include "cli/registry.hpp"
#include "comm/kernels.hpp"
#include "comm/op_layout.hpp"
#include "comm/protocol.hpp"
#include "common/check.hpp"
#include "weave/collectives.hpp"
#include "weave/error.hpp"
#include "weave/transport.hpp"

namespace weave::cli {
namespace {

struct PlanCommOptions {
  int world = 2;
  std::string bytes = "64M";
  std::string op = "all-reduce";
  std::string transport = "auto";
  std::string algorithm = "auto";
  std::string dtype = "bf16";
  int lsa_team = 0;  // 0: world (one NVLink domain)
  bool no_peer_access = false;
  int max_blocks = 264;  // H100/H200: 132 SMs x 2 co-resident lsa CTAs
};

int run_plan_comm(const PlanCommOptions& o) {
  // --bytes follows nccl-tests: all-gather = output bytes, reduce-scatter = input bytes.
  const size_t total = parse_size("--bytes", o.bytes);
  WEAVE_EXPECT_ARG(o.lsa_team <= o.world, "--lsa-team " << o.lsa_team << ": at most --world = " << o.world
                                                         << " ranks (0: the whole world)");
  auto op = parse_collective_op(o.op);
  WEAVE_EXPECT_ARG(op.has_value(), "--op '" << o.op << "': expected all-gather, reduce-scatter or all-reduce");
  auto dtype = parse_dtype(o.dtype);
  WEAVE_EXPECT_ARG(dtype && (*dtype == DType::kBF16 || *dtype == DType::kF32), "--dtype must be bf16 or fp32");
  PlanInputs in;
  in.op = *op;
  in.world = o.world;
  in.lsa_team_size = o.lsa_team > 0 ? o.lsa_team : o.world;
  in.peer_access = !o.no_peer_access;
  for (const auto& a : transport_availability({})) {
    if (a.transport == Transport::kNccl) in.compiled_nccl = a.compiled_in;
    if (a.transport == Transport::kCe) in.compiled_ce = a.compiled_in;
    if (a.transport == Transport::kLsa) in.compiled_lsa = a.compiled_in;
  }
  if (o.transport != "auto") {
    auto t = parse_transport(o.transport);
    WEAVE_EXPECT_ARG(t.has_value(), "--transport '" << o.transport << "': expected auto, nccl, ce or lsa");
    in.transport = *t;
  }
  auto alg = parse_algorithm(o.algorithm);
  WEAVE_EXPECT_ARG(alg.has_value(), "--algorithm '" << o.algorithm
                                                    << "': expected auto, push, pull, one-shot, two-shot, ll, nccl, nccl-ce");
  in.algorithm = *alg;
  const size_t esz = *op == CollectiveOp::kAllGather ? 1 : dtype_bytes(*dtype);
  const size_t per_rank = *op == CollectiveOp::kAllReduce ? total : total / static_cast<size_t>(o.world);
  const size_t count = std::max<size_t>(1, per_rank / esz);
  in.bytes = count * esz;
  CollectivePlan plan;
  std::string refused;
  try {
    plan = plan_collective(in);
  } catch (const Error& e) {
    // An algorithm the op or transport does not have is the user's input: one line, exit 2.
    // A transport this build or machine lacks is a report (exit 1).
    WEAVE_EXPECT_ARG(e.status() != Status::kInvalidArgument,
                     "--algorithm " << o.algorithm << (o.transport == "auto" ? "" : " --transport " + o.transport)
                                    << " --op " << o.op << ": " << e.message());
    refused = "(" + std::string(to_string(e.status())) + "): " + e.message();
  }
  std::printf("collective: %s, %s (nccl-tests size), world %d, %s per rank%s\n", o.op.c_str(), human_bytes(total).c_str(),
              o.world, human_bytes(in.bytes).c_str(), *op == CollectiveOp::kAllGather ? "" : (", " + o.dtype).c_str());
  std::printf("build: nccl %s, ce %s, lsa %s; NVLink/LSA team %d of %d ranks; peer access %s\n",
              in.compiled_nccl ? "in" : "OUT", in.compiled_ce ? "in" : "OUT", in.compiled_lsa ? "in" : "OUT",
              in.lsa_team_size, o.world, in.peer_access ? "yes" : "no");
  if (!refused.empty()) {
    std::printf("plan: refused %s\n", refused.c_str());
    return 1;
  }
  std::printf("plan: transport %s, algorithm %s%s\n", std::string(to_string(plan.transport)).c_str(),
              std::string(to_string(plan.algorithm)).c_str(), plan.fell_back ? " (fallback)" : "");
  std::printf("reason: %s\n", plan.reason.c_str());
  comm::OpShape shape{*op, plan.algorithm, o.world, esz, count, o.max_blocks};
  shape.ll_max_count = comm::ll_max_count_for(plan.transport, plan.algorithm, count, esz);
  WindowLayout layout;
  const comm::OpOffsets off = comm::add_op_regions(layout, "op", shape);
  std::printf("window (max_count = this size): %s\n", human_bytes(layout.total_bytes()).c_str());
  for (const auto& r : layout.regions())
    std::printf("  %-12s %-8s offset %12zu  %s\n", r.name.c_str(), std::string(to_string(r.kind)).c_str(), r.offset,
                human_bytes(r.bytes).c_str());
  if (plan.transport == Transport::kNccl) return 0;
  std::string per_call;
  const bool ll = comm::call_uses_ll(off, plan.algorithm, count);
  const bool two_shot =
      !ll && *op == CollectiveOp::kAllReduce && !comm::call_uses_one_shot(off, plan.algorithm, count);
  if (ll) {
    per_call = "ll: flag-in-data lines (8 payload bytes per 16-byte store) straight into every peer's LL buffer, "
               "one kernel, no fence; the receiver polls the lines";
    if (plan.algorithm == Algorithm::kAuto)
      per_call += " (auto: ll up to " + human_bytes(comm::kLLAutoMaxBytes) + " per peer)";
  } else if (*op == CollectiveOp::kAllReduce) {
    per_call = !two_shot ? "one-shot: push the whole input to every peer's staging slot, reduce all ranks in rank order"
                   : "two-shot: push chunk q to owner q, owner reduces in rank order and pushes its sum to every peer";
    if (plan.algorithm == Algorithm::kAuto)
      per_call += " (auto: one-shot up to " + human_bytes(comm::one_shot_auto_max_bytes(o.world)) + ")";
  } else if (*op == CollectiveOp::kAllGather) {
    per_call = plan.algorithm == Algorithm::kPull ? "pull: peers load this rank's block from its window"
                                                  : "push: this rank stores its block into every peer's output";
  } else {
    per_call = "push: block q of the input to owner q's staging slot; the owner reduces in rank order";
  }
  std::printf("per call: %s\n", per_call.c_str());
  if (plan.transport == Transport::kLsa && ll) {
    std::printf("lsa grid: %d CTAs x 512 threads (one 8-byte unit per thread, at most %d)\n",
                comm::ll_blocks_for(count * esz, o.max_blocks), o.max_blocks);
  } else if (plan.transport == Transport::kLsa) {
    const size_t moved = two_shot ? comm::max_owner_chunk(count, o.world, comm::kVecBytes / esz) * esz : in.bytes;
    std::printf("lsa grid: %d CTAs x 512 threads (~32 KiB per CTA per peer, at most %d)\n",
                comm::lsa_blocks_for(moved, o.max_blocks), o.max_blocks);
  } else {
    std::printf("ce: %d copies per call from %d per-peer streams, ordered by events; enter/arrive kernels of one CTA\n",
                o.world - 1, o.world - 1);
  }
  return 0;
}

void add_plan_comm(CLI::App& plan) {
  auto opts = std::make_shared<PlanCommOptions>();
  CLI::App* c = plan.add_subcommand("comm", "Transport and algorithm a collective picks for a size and world, and why");
  c->add_option("--op", opts->op, "all-gather | reduce-scatter | all-reduce")->capture_default_str();
  c->add_option("--world", opts->world, "ranks")->check(int_range(1, kMaxWorld))->capture_default_str();
  c->add_option("--bytes", opts->bytes, "size, nccl-tests convention (K/M/G suffixes)")->capture_default_str();
  c->add_option("--transport", opts->transport, "auto | nccl | ce | lsa")->capture_default_str();
  c->add_option("--algorithm", opts->algorithm, "auto | push | pull | one-shot | two-shot | ll | nccl | nccl-ce")
      ->capture_default_str();
  c->add_option("--dtype", opts->dtype, "reduction dtype: bf16 | fp32")->capture_default_str();
  c->add_option("--lsa-team", opts->lsa_team, "ranks in one NVLink domain with each rank, 1 .. world (0: world)")
      ->check(int_range(0, kMaxWorld));
  c->add_flag("--no-peer-access", opts->no_peer_access, "plan as if the GPUs had no peer access");
  c->add_option("--max-blocks", opts->max_blocks, "lsa grid cap (H200: 264)")
      ->check(int_range(1, 65535))->capture_default_str();
  c->callback([opts] { exit_code() = run_plan_comm(*opts); });
}

}  // namespace

WEAVE_REGISTER_PLAN_TOPIC(comm, add_plan_comm);

}  // namespace weave::cli
