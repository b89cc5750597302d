#include "fused/shared_window.hpp"

#include <string>

#include "comm/collective_impl.hpp"
#include "common/check.hpp"
#include "fused/all_gather/impl.hpp"
#include "fused/all_reduce/impl.hpp"

namespace weave::fused {


SharedWindowOps create_sharing(comm::Group& g, const std::vector<CollectiveConfig>& collectives,
                               const std::vector<GemmAllGatherConfig>& all_gathers,
                               const std::vector<GemmAllReduceConfig>& all_reduces) {
  WEAVE_EXPECT_ARG(!collectives.empty() || !all_gathers.empty() || !all_reduces.empty(),
                   "create_sharing_window: the lists name no op");
  Collective::Impl::check_shareable(collectives, "collectives");
  // Every Impl first (each validates and agrees with the other ranks), in a fixed order.
  std::vector<std::unique_ptr<Collective::Impl>> cs;
  std::vector<std::unique_ptr<GemmAllGather::Impl>> ags;
  std::vector<std::unique_ptr<GemmAllReduce::Impl>> ars;
  // An error names the list and the index of the config that broke a rule.
  auto where = [](const char* list, size_t i) { return "create_sharing_window: " + std::string(list) + "[" + std::to_string(i) + "]"; };
  for (size_t i = 0; i < collectives.size(); ++i)
    cs.push_back(with_context(where("collectives", i), [&] { return std::make_unique<Collective::Impl>(g, collectives[i]); }));
  for (size_t i = 0; i < all_gathers.size(); ++i)
    ags.push_back(with_context(where("all_gathers", i), [&] { return std::make_unique<GemmAllGather::Impl>(g, all_gathers[i]); }));
  for (size_t i = 0; i < all_reduces.size(); ++i)
    ars.push_back(with_context(where("all_reduces", i), [&] { return std::make_unique<GemmAllReduce::Impl>(g, all_reduces[i]); }));
  // One layout: every op's regions under its own prefix.
  WindowLayout layout;
  std::vector<comm::OpOffsets> c_offs;
  for (size_t i = 0; i < cs.size(); ++i)
    c_offs.push_back(comm::add_op_regions(layout, "c" + std::to_string(i), cs[i]->shape()));
  for (size_t i = 0; i < ags.size(); ++i) ags[i]->lay_out(layout, "ag" + std::to_string(i));
  for (size_t i = 0; i < ars.size(); ++i) ars[i]->lay_out(layout, "ar" + std::to_string(i));
  auto window = g.make_window(std::move(layout));
  SharedWindowOps out;
  for (size_t i = 0; i < cs.size(); ++i) {
    cs[i]->attach(window, c_offs[i]);
    out.collectives.push_back(Collective::Impl::wrap(std::move(cs[i])));
  }
  for (auto& im : ags) {
    im->attach(window);
    out.all_gathers.push_back(GemmAllGather::Impl::wrap(std::move(im)));
  }
  for (auto& im : ars) {
    im->attach(window);
    out.all_reduces.push_back(GemmAllReduce::Impl::wrap(std::move(im)));
  }
  return out;
}

}  // namespace weave::fused

namespace weave {

SharedWindowOps create_sharing_window(Communicator& comm, const std::vector<CollectiveConfig>& collectives,
                                      const std::vector<GemmAllGatherConfig>& all_gathers,
                                      const std::vector<GemmAllReduceConfig>& all_reduces) {
  std::shared_ptr<comm::Group> group = comm::nccl_group(comm);
  SharedWindowOps ops = fused::create_sharing(*group, collectives, all_gathers, all_reduces);
  // Every op keeps the group alive (the window is registered with its communicator).
  for (auto& op : ops.collectives) Collective::Impl::of(*op).owned_group = group;
  for (auto& op : ops.all_gathers) GemmAllGather::Impl::of(*op).owned_group = group;
  for (auto& op : ops.all_reduces) GemmAllReduce::Impl::of(*op).owned_group = group;
  return ops;
}

}  // namespace weave
