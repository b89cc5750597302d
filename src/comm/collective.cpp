// weave::Collective: construction on a group (plan, agreement, window, op init; one op or several
// sharing a window) and the public class's forwarding. run() and its transports: collective_run.cpp,
// collective_ce.cpp.
#include <algorithm>
#include <sstream>

#include "comm/collective_impl.hpp"
#include "comm/protocol.hpp"
#include "common/check.hpp"
#include "common/log.hpp"

namespace weave {

Collective::Impl::Impl(comm::Group& c, const CollectiveConfig& config, const comm::CollectiveHooks& hk)
    : group(&c), cfg(config), hooks(hk) {
  WEAVE_EXPECT_ARG(cfg.max_count >= 1, "CollectiveConfig.max_count must be >= 1 (the largest call's count)");
  WEAVE_EXPECT_ARG(cfg.op == CollectiveOp::kAllGather || cfg.dtype == DType::kBF16 || cfg.dtype == DType::kF32,
                   "CollectiveConfig.dtype for " << to_string(cfg.op) << " must be bf16 or fp32 (fp32 accumulation), got "
                                                 << to_string(cfg.dtype));
  WEAVE_EXPECT_ARG(cfg.ce_sm_share >= 0 && cfg.ce_sm_share <= 0.9,
                   "CollectiveConfig.ce_sm_share must be in [0, 0.9], got " << cfg.ce_sm_share);
  WEAVE_EXPECT_ARG(hooks.max_blocks >= 0 && hooks.max_blocks <= 4096,
                   "CollectiveHooks.max_blocks must be in 0..4096 (0 = from occupancy), got " << hooks.max_blocks);
  esz = cfg.op == CollectiveOp::kAllGather ? 1 : dtype_bytes(cfg.dtype);
  PlanInputs pin;
  pin.op = cfg.op;
  pin.bytes = cfg.max_count * esz;
  pin.world = c.world_size();
  pin.lsa_team_size = c.lsa_team_size();
  // The emulated world has no NCCL communicator: its nccl transport is as good as compiled out.
  pin.compiled_nccl = WEAVE_ENABLE_NCCL_TRANSPORT && c.nccl() != nullptr;
  pin.compiled_ce = WEAVE_ENABLE_CE;
  pin.compiled_lsa = WEAVE_ENABLE_LSA;
  pin.peer_access = true;  // NCCL's LSA team (lsa_team_size) is built from peer access
  pin.stream_mem_ops = comm::StreamMemOps::unsupported_reason(c.device()).empty();
  pin.transport = cfg.transport;
  pin.algorithm = cfg.algorithm;
  plan = plan_collective(pin);
  if (plan.fell_back) WEAVE_LOG(kWarn, "rank " << c.rank() << ": " << to_string(cfg.op) << ": " << plan.reason);
  WEAVE_CHECK_CUDA(cudaSetDevice(c.device()));

  // Every rank must run the same op with the same grid cap (flags are per CTA).
  // Ranks sharing one GPU (the emulated world) share its SMs: each gets its part, so all ranks'
  // CTAs are resident together.
  int blocks = hooks.max_blocks > 0 ? hooks.max_blocks
                                  : std::max(1, comm::lsa_max_blocks(c.device(), c.world_size()) / c.ranks_per_device());
  for (auto b : c.all_gather(static_cast<uint64_t>(blocks), "the lsa grid size"))
    blocks = std::min<int>(blocks, static_cast<int>(b));
  max_blocks = blocks;
  std::ostringstream id;
  id << "weave.collective.v1|" << static_cast<int>(cfg.op) << "|" << static_cast<int>(plan.transport) << "|"
     << static_cast<int>(plan.algorithm) << "|" << static_cast<int>(cfg.dtype) << "|" << cfg.max_count << "|"
     << hooks.flow_control << "|" << hooks.initial_epoch << "|" << hooks.stale_slot_lag << "|" << max_blocks << "|" << cfg.ce_sm_share << "|"
     << hooks.receive_delay_ns << "|" << hooks.ce_ungated_peer_copies;
  const std::string ids = id.str();
  rt = std::make_unique<comm::OpRuntime>(c);
  rt->agree_config(ids, std::string(to_string(cfg.op)) +
                            " configuration (transport, algorithm, dtype, max_count, testing hooks)");
  try {
    if (plan.algorithm == Algorithm::kNcclCopyEngine) {
      WEAVE_EXPECT(c.communicator() != nullptr, Status::kUnavailable,
                   "algorithm 'nccl-ce' needs an NCCL communicator; " << c.describe() << " has none");
      ncclConfig_t nc = NCCL_CONFIG_INITIALIZER;
      nc.CTAPolicy = NCCL_CTA_POLICY_ZERO;
      ncclComm_t split = nullptr;
      WEAVE_CHECK_NCCL(ncclCommSplit(c.nccl(), 0, c.rank(), &split, &nc));
      CommOptions o;
      o.timeout_s = c.timeout_s();
      nccl_ce_comm = Communicator::adopt(split, o);
      nccl_ce_group = comm::nccl_group(*nccl_ce_comm);
    }
  } catch (...) {
    release();
    throw;
  }
}

comm::OpShape Collective::Impl::shape() const {
  comm::OpShape shape;
  shape.op = cfg.op;
  shape.algorithm = plan.algorithm;
  shape.world = group->world_size();
  shape.elem_bytes = esz;
  shape.max_count = cfg.max_count;
  shape.max_blocks = max_blocks;
  shape.ll_max_count = comm::ll_max_count_for(plan.transport, plan.algorithm, cfg.max_count, esz);
  return shape;
}

void Collective::Impl::attach(std::shared_ptr<comm::OpWindow> window, const comm::OpOffsets& offsets) {
  comm::Group& c = *group;
  try {
    off = offsets;
    win = window.get();
    WEAVE_CHECK_CUDA(cudaSetDevice(c.device()));
    const comm::ProtoRegions regions{.control = off.control, .credits = off.credits, .flags = off.flags,
                                     .flag_blocks = max_blocks};
    rt->attach(std::move(window), regions, hooks.flow_control, hooks.initial_epoch,
               /*needs_peers=*/plan.transport != Transport::kNccl, hooks.stale_slot_lag);
    proto = rt->proto();
    if (plan.transport == Transport::kCe) {
      if (plan.algorithm == Algorithm::kPull) {
        mem_ops = comm::StreamMemOps::agreed(c, "ce pull (device-triggered copies)");
      }
      copies.open(c.world_size() - 1);
    }
  } catch (...) {
    release();
    throw;
  }
}

void Collective::Impl::release() noexcept {
  cudaSetDevice(group->device());
  copies.release();
  win = nullptr;
  if (rt) rt->release();  // drops the window before the communicator it is registered with
  nccl_ce_group.reset();
  nccl_ce_comm.reset();
}

Collective::Impl::~Impl() { release(); }

ncclComm_t Collective::Impl::nccl_comm() const { return nccl_ce_comm ? nccl_ce_comm->nccl() : group->nccl(); }

void Collective::Impl::check() const {
  if (rt) rt->check(std::string(to_string(cfg.op)) + " over " + std::string(to_string(plan.transport)));
}

// --- construction on a group ---
std::unique_ptr<Collective> Collective::Impl::create(comm::Group& g, const CollectiveConfig& config,
                                                     const comm::CollectiveHooks& hooks) {
  auto impl = std::make_unique<Impl>(g, config, hooks);
  WindowLayout layout;
  const comm::OpOffsets off = comm::add_op_regions(layout, "op", impl->shape());
  impl->attach(impl->window_group().make_window(std::move(layout)), off);
  return std::unique_ptr<Collective>(new Collective(std::move(impl)));
}

void Collective::Impl::check_shareable(const std::vector<CollectiveConfig>& configs, const char* list) {
  for (size_t i = 0; i < configs.size(); ++i)
    WEAVE_EXPECT_ARG(configs[i].algorithm != Algorithm::kNcclCopyEngine,
                     "create_sharing_window: " << list << "[" << i << "] uses algorithm 'nccl-ce', whose window belongs "
                                               << "to its own communicator split; construct it on its own");
}

std::vector<std::unique_ptr<Collective>> Collective::Impl::create_sharing(comm::Group& g,
                                                                          const std::vector<CollectiveConfig>& configs) {
  WEAVE_EXPECT_ARG(!configs.empty(), "create_sharing_window: configs must name at least one collective");
  std::vector<std::unique_ptr<Impl>> impls;
  check_shareable(configs, "configs");
  for (size_t i = 0; i < configs.size(); ++i)  // an error says which config broke the rule
    impls.push_back(with_context("create_sharing_window: configs[" + std::to_string(i) + "]",
                                 [&] { return std::make_unique<Impl>(g, configs[i]); }));
  WindowLayout layout;
  std::vector<comm::OpOffsets> offs;
  for (size_t i = 0; i < impls.size(); ++i)
    offs.push_back(comm::add_op_regions(layout, "op" + std::to_string(i), impls[i]->shape()));
  auto window = g.make_window(std::move(layout));
  std::vector<std::unique_ptr<Collective>> out;
  for (size_t i = 0; i < impls.size(); ++i) {
    impls[i]->attach(window, offs[i]);
    out.push_back(std::unique_ptr<Collective>(new Collective(std::move(impls[i]))));
  }
  return out;
}

std::unique_ptr<Collective> Collective::Impl::create(Communicator& comm, const CollectiveConfig& config,
                                                     const comm::CollectiveHooks& hooks) {
  std::shared_ptr<comm::Group> group = comm::nccl_group(comm);
  std::unique_ptr<Collective> made = create(*group, config, hooks);
  made->impl_->owned_group = std::move(group);
  return made;
}

// --- public forwarding ---
Collective::Collective(Communicator& comm, const CollectiveConfig& config)
    : impl_(std::move(Impl::create(comm, config)->impl_)) {}

Collective::Collective(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Collective> Collective::Impl::wrap(std::unique_ptr<Impl> impl) {
  return std::unique_ptr<Collective>(new Collective(std::move(impl)));
}

std::vector<std::unique_ptr<Collective>> Collective::create_sharing_window(Communicator& comm,
                                                                           const std::vector<CollectiveConfig>& configs) {
  std::shared_ptr<comm::Group> group = comm::nccl_group(comm);
  auto ops = Impl::create_sharing(*group, configs);
  for (auto& op : ops) op->impl_->owned_group = group;  // every op keeps the group alive
  return ops;
}

const SymmetricWindow& Collective::window() const {
  const SymmetricWindow* sym = impl_->win->symmetric();
  WEAVE_EXPECT(sym != nullptr, Status::kUnavailable, "Collective::window: this op's window is not an NCCL symmetric "
                                                     "window (emulated world, tests only)");
  return *sym;
}
Collective::~Collective() = default;
const CollectiveConfig& Collective::config() const noexcept { return impl_->cfg; }
Transport Collective::transport() const noexcept { return impl_->plan.transport; }
Algorithm Collective::algorithm() const noexcept { return impl_->plan.algorithm; }
void Collective::run(const void* in, void* out, std::size_t count, cudaStream_t stream) { impl_->run(in, out, count, stream); }
void* Collective::window_input() const noexcept { return impl_->win->local() + impl_->off.input; }
void* Collective::window_output() const noexcept { return impl_->win->local() + impl_->off.output; }
void* Collective::peer_window_output(int r) const { return impl_->win->peer(r) + impl_->off.output; }
void Collective::check() const { impl_->check(); }

std::string Collective::describe() const {
  std::ostringstream os;
  os << to_string(impl_->cfg.op);
  if (impl_->cfg.op != CollectiveOp::kAllGather) os << " " << to_string(impl_->cfg.dtype);
  os << " over " << to_string(impl_->plan.transport) << " (" << to_string(impl_->plan.algorithm) << "), rank "
     << impl_->group->rank() << "/" << impl_->group->world_size() << ", window " << impl_->win->bytes() << " bytes"
     << (impl_->rt->window_ptr().use_count() > 1
             ? " (shared by " + std::to_string(impl_->rt->window_ptr().use_count()) + " ops)"
             : std::string())
     << ", "
     << impl_->max_blocks << " max blocks, credits " << (impl_->hooks.flow_control ? "on" : "OFF (testing)")
     << "; " << impl_->plan.reason;
  return os.str();
}

}  // namespace weave
