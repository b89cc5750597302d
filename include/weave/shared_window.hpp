// Several weave ops in ONE symmetric window: one allocation, one NCCL registration and one device
// communicator for all of them, as an inference engine wants for the dozens of layers that each
// run a GemmAllReduce, a GemmAllGather, a GemmReduceScatter, an AllGatherGemm or a collective. Op i
// of each kind owns the regions "c<i>.*", "ag<i>.*", "ar<i>.*", "rs<i>.*" and "agm<i>.*" of the
// window (docs/comm.md "window layout"), so none aliases another, and the ops may run in any interleaving on one stream (each keeps its own epochs,
// credits and flags). Collective, like every op's constructor: every rank must pass the same
// lists (kMismatch otherwise); each config is validated as its op's constructor does, and an error
// names the list and index ("all_reduces[1]: ..."). A Collective of algorithm 'nccl-ce' is refused
// (its window belongs to its own communicator split). The window lives until the last of the
// returned ops is destroyed.
#pragma once
#include <memory>
#include <vector>

#include "weave/all_gather_gemm.hpp"
#include "weave/collectives.hpp"
#include "weave/communicator.hpp"
#include "weave/export.hpp"
#include "weave/gemm_all_gather.hpp"
#include "weave/gemm_all_reduce.hpp"
#include "weave/gemm_reduce_scatter.hpp"

namespace weave WEAVE_API {

struct SharedWindowOps {
  std::vector<std::unique_ptr<Collective>> collectives;
  std::vector<std::unique_ptr<GemmAllGather>> all_gathers;
  std::vector<std::unique_ptr<GemmAllReduce>> all_reduces;
  std::vector<std::unique_ptr<GemmReduceScatter>> reduce_scatters;
  std::vector<std::unique_ptr<AllGatherGemm>> all_gather_gemms;
};

// The ops to build, by kind (each list in the order its ops come back).
struct SharedWindowConfigs {
  std::vector<CollectiveConfig> collectives;
  std::vector<GemmAllGatherConfig> all_gathers;
  std::vector<GemmAllReduceConfig> all_reduces;
  std::vector<GemmReduceScatterConfig> reduce_scatters;
  std::vector<AllGatherGemmConfig> all_gather_gemms;
};

SharedWindowOps create_sharing_window(Communicator& comm, const SharedWindowConfigs& configs);
// The same for the first three kinds (the signature before the sequence-parallel pair).
SharedWindowOps create_sharing_window(Communicator& comm, const std::vector<CollectiveConfig>& collectives,
                                      const std::vector<GemmAllGatherConfig>& all_gathers,
                                      const std::vector<GemmAllReduceConfig>& all_reduces);

}  // namespace weave
