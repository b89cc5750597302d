// weave._weave bindings of communicators, collectives and the NCCL versions
// (include/weave/communicator.hpp, collectives.hpp).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "weave/collectives.hpp"
#include "weave/communicator.hpp"

#include "ext_common.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace weave_py {

namespace {

nb::bytes id_bytes(const ncclUniqueId& id) { return nb::bytes(reinterpret_cast<const char*>(id.internal), sizeof(id.internal)); }

ncclUniqueId id_from(nb::bytes b) {
  ncclUniqueId id{};
  if (b.size() != sizeof(id.internal))
    throw_arg("argument 'unique_id': must be " + std::to_string(sizeof(id.internal)) + " bytes (got " +
              std::to_string(b.size()) + ")");
  std::memcpy(id.internal, b.c_str(), sizeof(id.internal));
  return id;
}

}  // namespace

void bind_comm(nb::module_& m) {
  nb::class_<weave::TransportAvailability>(m, "TransportAvailability")
      .def_ro("transport", &weave::TransportAvailability::transport)
      .def_ro("compiled_in", &weave::TransportAvailability::compiled_in)
      .def_ro("available", &weave::TransportAvailability::available)
      .def_ro("reason", &weave::TransportAvailability::reason);

  nb::class_<PyCommunicator>(m, "Communicator")
      .def_static("new_unique_id", [] { return id_bytes(weave::Communicator::new_unique_id()); })
      .def_static(
          "create",
          [](nb::bytes id, int rank, int world, int device, double timeout_s, std::string tag) {
            ncclUniqueId uid = id_from(id);
            weave::CommOptions o{.tag = std::move(tag), .timeout_s = timeout_s};
            std::unique_ptr<weave::Communicator> c;
            {
              nb::gil_scoped_release release;
              c = weave::Communicator::create(uid, rank, world, device, o);
            }
            return new PyCommunicator{std::move(c)};
          },
          "unique_id"_a, "rank"_a, "world"_a, "device"_a, "timeout_s"_a, "tag"_a, nb::rv_policy::take_ownership)
      .def_static(
          "create_local",
          [](const std::vector<int>& devices, double timeout_s, std::string tag) {
            weave::CommOptions o{.tag = std::move(tag), .timeout_s = timeout_s};
            std::vector<std::unique_ptr<weave::Communicator>> cs;
            {
              nb::gil_scoped_release release;
              cs = weave::Communicator::create_local(devices, o);
            }
            std::vector<PyCommunicator*> out;
            for (auto& c : cs) out.push_back(new PyCommunicator{std::move(c)});
            return out;
          },
          "devices"_a, "timeout_s"_a, "tag"_a, nb::rv_policy::take_ownership)
      .def_static(
          "unique_id_via_file",
          [](const std::string& path, int rank, double timeout_s) {
            ncclUniqueId id;
            {
              nb::gil_scoped_release release;
              id = weave::unique_id_via_file(path, rank, timeout_s);
            }
            return id_bytes(id);
          },
          "path"_a, "rank"_a, "timeout_s"_a)
      .def_prop_ro("rank", [](const PyCommunicator& c) { return c.get().rank(); })
      .def_prop_ro("world_size", [](const PyCommunicator& c) { return c.get().world_size(); })
      .def_prop_ro("device", [](const PyCommunicator& c) { return c.get().device(); })
      .def_prop_ro("timeout_s", [](const PyCommunicator& c) { return c.get().timeout_s(); })
      .def_prop_ro("lsa_team_size", [](const PyCommunicator& c) { return c.get().lsa_team_size(); })
      .def_prop_ro("broken", [](const PyCommunicator& c) { return c.get().broken(); })
      .def_prop_ro("closed", [](const PyCommunicator& c) { return !c.comm; })
      .def_prop_ro("nccl_comm", [](const PyCommunicator& c) { return reinterpret_cast<std::uintptr_t>(c.get().nccl()); })
      .def("transports", [](const PyCommunicator& c) { return c.get().transports(); })
      .def("barrier", [](const PyCommunicator& c) {
        const weave::Communicator& comm = c.get();
        nb::gil_scoped_release release;
        comm.barrier();
      });

  nb::class_<weave::SelfTestReport>(m, "SelfTestReport")
      .def_ro("ok", &weave::SelfTestReport::ok)
      .def_ro("caller_buffers_ok", &weave::SelfTestReport::caller_buffers_ok)
      .def_ro("window_buffers_ok", &weave::SelfTestReport::window_buffers_ok)
      .def_ro("wrong_from_rank", &weave::SelfTestReport::wrong_from_rank)
      .def_ro("detail", &weave::SelfTestReport::detail);

  nb::class_<weave::CollectiveConfig>(m, "CollectiveConfig")
      .def(nb::init<>())
      .def_rw("op", &weave::CollectiveConfig::op)
      .def("set_transport", [](weave::CollectiveConfig& c, weave::Transport t) { c.transport = t; })  // default: choose
      .def_rw("algorithm", &weave::CollectiveConfig::algorithm)
      .def_rw("dtype", &weave::CollectiveConfig::dtype)
      .def_rw("max_count", &weave::CollectiveConfig::max_count)
      .def_rw("ce_sm_share", &weave::CollectiveConfig::ce_sm_share);

  nb::class_<weave::Collective>(m, "Collective")
      .def("__init__",
           [](weave::Collective* self, PyCommunicator& comm, const weave::CollectiveConfig& cfg) {
             weave::Communicator& c = comm.get();
             nb::gil_scoped_release release;
             new (self) weave::Collective(c, cfg);
           },
           "comm"_a, "config"_a, nb::keep_alive<1, 2>())
      .def_prop_ro("op", [](const weave::Collective& c) { return c.config().op; })
      .def_prop_ro("dtype", [](const weave::Collective& c) { return c.config().dtype; })
      .def_prop_ro("max_count", [](const weave::Collective& c) { return c.config().max_count; })
      .def_prop_ro("transport", &weave::Collective::transport)
      .def_prop_ro("algorithm", &weave::Collective::algorithm)
      .def("describe", &weave::Collective::describe)
      .def("run",
           [](weave::Collective& c, std::uintptr_t in, std::uintptr_t out, std::size_t count, std::uintptr_t stream) {
             c.run(reinterpret_cast<const void*>(in), reinterpret_cast<void*>(out), count, as_stream(stream));
           },
           "inp"_a, "out"_a, "count"_a, "stream"_a, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("window_input", [](const weave::Collective& c) { return reinterpret_cast<std::uintptr_t>(c.window_input()); })
      .def_prop_ro("window_output", [](const weave::Collective& c) { return reinterpret_cast<std::uintptr_t>(c.window_output()); })
      .def("check", &weave::Collective::check)
      .def("self_test", &weave::Collective::self_test, "count"_a, nb::call_guard<nb::gil_scoped_release>());

  m.def("nccl_runtime_version", [] {
    int v = 0;
    ncclGetVersion(&v);
    return v;
  });
  m.attr("nccl_build_version") = WEAVE_NCCL_BUILD_VERSION;
}

}  // namespace weave_py
