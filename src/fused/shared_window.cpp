#include "fused/shared_window.hpp"

#include <string>

#include "comm/collective_impl.hpp"
#include "common/check.hpp"
#include "fused/all_gather/impl.hpp"
#include "fused/ag_gemm/impl.hpp"
#include "fused/all_reduce/impl.hpp"
#include "fused/reduce_scatter/impl.hpp"

namespace weave::fused {


SharedWindowOps create_sharing(comm::Group& g, const SharedWindowConfigs& configs) {
  WEAVE_EXPECT_ARG(!configs.collectives.empty() || !configs.all_gathers.empty() || !configs.all_reduces.empty() ||
                       !configs.reduce_scatters.empty() || !configs.all_gather_gemms.empty(),
                   "create_sharing_window: the lists name no op");
  Collective::Impl::check_shareable(configs.collectives, "collectives");
  // Every Impl first (each validates and agrees with the other ranks), in a fixed order.
  std::vector<std::unique_ptr<Collective::Impl>> cs;
  std::vector<std::unique_ptr<GemmAllGather::Impl>> ags;
  std::vector<std::unique_ptr<GemmAllReduce::Impl>> ars, rss;  // rss: leg kReduceScatter
  std::vector<std::unique_ptr<AllGatherGemm::Impl>> agms;
  // An error names the list and the index of the config that broke a rule.
  auto where = [](const char* list, size_t i) { return "create_sharing_window: " + std::string(list) + "[" + std::to_string(i) + "]"; };
  for (size_t i = 0; i < configs.collectives.size(); ++i)
    cs.push_back(with_context(where("collectives", i),
                              [&] { return std::make_unique<Collective::Impl>(g, configs.collectives[i]); }));
  for (size_t i = 0; i < configs.all_gathers.size(); ++i)
    ags.push_back(with_context(where("all_gathers", i),
                               [&] { return std::make_unique<GemmAllGather::Impl>(g, configs.all_gathers[i]); }));
  for (size_t i = 0; i < configs.all_reduces.size(); ++i)
    ars.push_back(with_context(where("all_reduces", i),
                               [&] { return std::make_unique<GemmAllReduce::Impl>(g, configs.all_reduces[i]); }));
  for (size_t i = 0; i < configs.reduce_scatters.size(); ++i)
    rss.push_back(with_context(where("reduce_scatters", i), [&] {
      const std::string bad = GemmReduceScatter::validate(configs.reduce_scatters[i], g.world_size());
      WEAVE_EXPECT_ARG(bad.empty(), "GemmReduceScatterConfig: " << bad);
      return std::make_unique<GemmAllReduce::Impl>(g, fused::grs_ar_config(configs.reduce_scatters[i]),
                                                   fused::GemmAllReduceHooks{}, fused::ArLeg::kReduceScatter);
    }));
  for (size_t i = 0; i < configs.all_gather_gemms.size(); ++i)
    agms.push_back(with_context(where("all_gather_gemms", i),
                                [&] { return std::make_unique<AllGatherGemm::Impl>(g, configs.all_gather_gemms[i]); }));
  // One layout: every op's regions under its own prefix.
  WindowLayout layout;
  std::vector<comm::OpOffsets> c_offs;
  for (size_t i = 0; i < cs.size(); ++i)
    c_offs.push_back(comm::add_op_regions(layout, "c" + std::to_string(i), cs[i]->shape()));
  for (size_t i = 0; i < ags.size(); ++i) ags[i]->lay_out(layout, "ag" + std::to_string(i));
  for (size_t i = 0; i < ars.size(); ++i) ars[i]->lay_out(layout, "ar" + std::to_string(i));
  for (size_t i = 0; i < rss.size(); ++i) rss[i]->lay_out(layout, "rs" + std::to_string(i));
  for (size_t i = 0; i < agms.size(); ++i) agms[i]->lay_out(layout, "agm" + std::to_string(i));
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
  for (size_t i = 0; i < rss.size(); ++i) {
    rss[i]->attach(window);
    auto rs = std::make_unique<GemmReduceScatter::Impl>();
    rs->cfg = configs.reduce_scatters[i];
    rs->ar = std::move(rss[i]);
    out.reduce_scatters.push_back(GemmReduceScatter::Impl::wrap(std::move(rs)));
  }
  for (auto& im : agms) {
    im->attach(window);
    out.all_gather_gemms.push_back(AllGatherGemm::Impl::wrap(std::move(im)));
  }
  return out;
}

}  // namespace weave::fused

namespace weave {

SharedWindowOps create_sharing_window(Communicator& comm, const SharedWindowConfigs& configs) {
  std::shared_ptr<comm::Group> group = comm::nccl_group(comm);
  SharedWindowOps ops = fused::create_sharing(*group, configs);
  // Every op keeps the group alive (the window is registered with its communicator).
  for (auto& op : ops.collectives) Collective::Impl::of(*op).owned_group = group;
  for (auto& op : ops.all_gathers) GemmAllGather::Impl::of(*op).owned_group = group;
  for (auto& op : ops.all_reduces) GemmAllReduce::Impl::of(*op).owned_group = group;
  for (auto& op : ops.reduce_scatters) GemmReduceScatter::Impl::of(*op).owned_group = group;
  for (auto& op : ops.all_gather_gemms) AllGatherGemm::Impl::of(*op).owned_group = group;
  return ops;
}

SharedWindowOps create_sharing_window(Communicator& comm, const std::vector<CollectiveConfig>& collectives,
                                      const std::vector<GemmAllGatherConfig>& all_gathers,
                                      const std::vector<GemmAllReduceConfig>& all_reduces) {
  SharedWindowConfigs configs;
  configs.collectives = collectives;
  configs.all_gathers = all_gathers;
  configs.all_reduces = all_reduces;
  return create_sharing_window(comm, configs);
}

}  // namespace weave
