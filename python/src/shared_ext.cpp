// weave._weave binding of weave::create_sharing_window (include/weave/shared_window.hpp): several
// collectives and fused ops in one symmetric window. The Python layer (python/weave/_shared.py)
// parses and validates each spec first and wraps the returned ops in weave's Python classes.
#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include "ext_common.hpp"
#include "weave/shared_window.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace weave_py {

namespace {

// Hands each op to Python, which owns and deletes it. The Python layer then ties each op's lifetime
// to the communicator's (_tie below), as the ops' own constructors do with keep_alive: the window
// and the ops' device state are released before the communicator that registered them.
template <class Op>
nb::list to_python(std::vector<std::unique_ptr<Op>>& ops) {
  nb::list out;
  for (auto& op : ops) out.append(nb::cast(op.release(), nb::rv_policy::take_ownership));
  return out;
}

}  // namespace

void bind_shared(nb::module_& m) {
  m.def(
      "create_sharing_window",
      [](PyCommunicator& py_comm, const std::vector<weave::CollectiveConfig>& collectives,
         const std::vector<weave::GemmAllGatherConfig>& all_gathers,
         const std::vector<weave::GemmAllReduceConfig>& all_reduces,
         const std::vector<weave::GemmReduceScatterConfig>& reduce_scatters,
         const std::vector<weave::AllGatherGemmConfig>& all_gather_gemms) {
        weave::Communicator& comm = py_comm.get();
        weave::SharedWindowConfigs configs;
        configs.collectives = collectives;
        configs.all_gathers = all_gathers;
        configs.all_reduces = all_reduces;
        configs.reduce_scatters = reduce_scatters;
        configs.all_gather_gemms = all_gather_gemms;
        weave::SharedWindowOps ops;
        {
          nb::gil_scoped_release release;  // collective: blocks until every rank arrives
          ops = weave::create_sharing_window(comm, configs);
        }
        return nb::make_tuple(to_python(ops.collectives), to_python(ops.all_gathers), to_python(ops.all_reduces),
                              to_python(ops.reduce_scatters), to_python(ops.all_gather_gemms));
      },
      "comm"_a, "collectives"_a, "all_gathers"_a, "all_reduces"_a, "reduce_scatters"_a, "all_gather_gemms"_a);
  // Keeps `comm` alive while `op` is (nanobind's keep_alive policy, applied to an existing object).
  m.def("_tie", [](nb::handle, nb::handle) {}, "op"_a, "comm"_a, nb::keep_alive<1, 2>());
}

}  // namespace weave_py
