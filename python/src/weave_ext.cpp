// weave._weave: the nanobind layer over the public C++ API (include/weave/). It sees raw pointers,
// shapes and strides only; the Python package (python/weave/) turns torch tensors,
// __cuda_array_interface__ and DLPack producers into them, resolves streams and owns the operands'
// lifetimes. Every weave::Error becomes the Python weave.Error built by the factory the package
// registers (status, message, call, location). Calls that may block on other ranks or on the GPU
// release the GIL.
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
#include "weave/device.hpp"
#include "weave/error.hpp"
#include "weave/gemm.hpp"
#include "weave/quant.hpp"
#include "weave/tensor.hpp"
#include "weave/types.hpp"

#include "ext_common.hpp"

namespace nb = nanobind;
using namespace nb::literals;

using weave_py::as_stream;
using weave_py::PyCommunicator;
using weave_py::throw_arg;

namespace {

PyObject* g_error_factory = nullptr;  // weave._errors.from_cpp; leaked on purpose (outlives teardown)


weave::TensorView make_view(std::uintptr_t ptr, weave::DType dtype, const std::vector<int64_t>& shape,
                            const std::vector<int64_t>& strides, int device) {
  if (shape.size() != strides.size()) throw_arg("TensorView: shape and strides differ in rank");
  if (shape.size() > static_cast<size_t>(weave::kMaxRank))
    throw_arg("TensorView: rank " + std::to_string(shape.size()) + " exceeds " + std::to_string(weave::kMaxRank));
  weave::TensorView v;
  v.data = reinterpret_cast<void*>(ptr);
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    v.shape[i] = shape[i];
    v.strides[i] = strides[i];
  }
  v.device = device;
  return v;
}

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

NB_MODULE(_weave, m) {
  m.doc() = "weave C++ API (internal; use the weave package)";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const weave::Error& e) {
      if (g_error_factory == nullptr) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return;
      }
      PyObject* exc = PyObject_CallFunction(g_error_factory, "issss", static_cast<int>(e.status()), e.message().c_str(),
                                            e.call().c_str(), e.location().c_str(), e.what());
      if (exc == nullptr) return;  // the factory raised: that error stands
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
      Py_DECREF(exc);
    }
  });
  m.def("_set_error_factory", [](nb::object f) {
    Py_XDECREF(g_error_factory);
    g_error_factory = f.release().ptr();
  });

  nb::enum_<weave::Status>(m, "Status")
      .value("OK", weave::Status::kOk)
      .value("INVALID_ARGUMENT", weave::Status::kInvalidArgument)
      .value("UNSUPPORTED", weave::Status::kUnsupported)
      .value("UNAVAILABLE", weave::Status::kUnavailable)
      .value("NO_DEVICE", weave::Status::kNoDevice)
      .value("CUDA_ERROR", weave::Status::kCudaError)
      .value("DRIVER_ERROR", weave::Status::kDriverError)
      .value("NCCL_ERROR", weave::Status::kNcclError)
      .value("CUBLAS_ERROR", weave::Status::kCublasError)
      .value("TIMEOUT", weave::Status::kTimeout)
      .value("MISMATCH", weave::Status::kMismatch)
      .value("INTERNAL", weave::Status::kInternal);
  m.def("status_text", [](weave::Status s) { return std::string(weave::to_string(s)); });

  nb::enum_<weave::DType>(m, "DType")
      .value("BF16", weave::DType::kBF16)
      .value("F32", weave::DType::kF32)
      .value("E4M3", weave::DType::kE4M3)
      .value("UE8M0", weave::DType::kUE8M0);
  nb::enum_<weave::ScaleMode>(m, "ScaleMode")
      .value("BF16", weave::ScaleMode::kBF16)
      .value("PTPC", weave::ScaleMode::kPtpc)
      .value("BLOCKSCALE", weave::ScaleMode::kBlockscale)
      .value("MXFP8", weave::ScaleMode::kMxfp8);
  nb::enum_<weave::ScaleLayout>(m, "ScaleLayout")
      .value("RAW", weave::ScaleLayout::kRaw)
      .value("PACKED", weave::ScaleLayout::kPacked)
      .value("MN_MAJOR", weave::ScaleLayout::kMnMajor);
  nb::enum_<weave::Transport>(m, "Transport")
      .value("NCCL", weave::Transport::kNccl)
      .value("CE", weave::Transport::kCe)
      .value("LSA", weave::Transport::kLsa);
  nb::enum_<weave::CollectiveOp>(m, "CollectiveOp")
      .value("ALL_GATHER", weave::CollectiveOp::kAllGather)
      .value("REDUCE_SCATTER", weave::CollectiveOp::kReduceScatter)
      .value("ALL_REDUCE", weave::CollectiveOp::kAllReduce);
  nb::enum_<weave::Algorithm>(m, "Algorithm")
      .value("AUTO", weave::Algorithm::kAuto)
      .value("PUSH", weave::Algorithm::kPush)
      .value("PULL", weave::Algorithm::kPull)
      .value("ONE_SHOT", weave::Algorithm::kOneShot)
      .value("TWO_SHOT", weave::Algorithm::kTwoShot)
      .value("NCCL_DEFAULT", weave::Algorithm::kNcclDefault)
      .value("NCCL_COPY_ENGINE", weave::Algorithm::kNcclCopyEngine)
      .value("LOW_LATENCY", weave::Algorithm::kLowLatency);

  // The C++ spellings ("bf16", "ptpc", "all-reduce", "one-shot", ...), so Python accepts exactly
  // what the CLI and the C++ parse functions accept.
  m.def("parse_dtype", [](std::string_view s) { return weave::parse_dtype(s); });
  m.def("parse_scale_mode", [](std::string_view s) { return weave::parse_scale_mode(s); });
  m.def("parse_scale_layout", [](std::string_view s) { return weave::parse_scale_layout(s); });
  m.def("parse_transport", [](std::string_view s) { return weave::parse_transport(s); });
  m.def("parse_collective_op", [](std::string_view s) { return weave::parse_collective_op(s); });
  m.def("parse_algorithm", [](std::string_view s) { return weave::parse_algorithm(s); });
  m.def("name", [](weave::DType v) { return std::string(weave::to_string(v)); });
  m.def("name", [](weave::ScaleMode v) { return std::string(weave::to_string(v)); });
  m.def("name", [](weave::ScaleLayout v) { return std::string(weave::to_string(v)); });
  m.def("name", [](weave::Transport v) { return std::string(weave::to_string(v)); });
  m.def("name", [](weave::CollectiveOp v) { return std::string(weave::to_string(v)); });
  m.def("name", [](weave::Algorithm v) { return std::string(weave::to_string(v)); });
  m.def("dtype_bytes", [](weave::DType d) { return weave::dtype_bytes(d); });

  nb::class_<weave::TensorView>(m, "TensorView")
      .def("__init__",
           [](weave::TensorView* self, std::uintptr_t ptr, weave::DType dtype, const std::vector<int64_t>& shape,
              const std::vector<int64_t>& strides, int device) {
             new (self) weave::TensorView(make_view(ptr, dtype, shape, strides, device));
           },
           "ptr"_a, "dtype"_a, "shape"_a, "strides"_a, "device"_a)
      .def_prop_ro("ptr", [](const weave::TensorView& v) { return reinterpret_cast<std::uintptr_t>(v.data); })
      .def_prop_ro("device", [](const weave::TensorView& v) { return v.device; })
      .def("describe", &weave::TensorView::describe);

  nb::class_<weave::GemmProblem>(m, "GemmProblem")
      .def(nb::init<>())
      .def_rw("m", &weave::GemmProblem::m)
      .def_rw("n", &weave::GemmProblem::n)
      .def_rw("k", &weave::GemmProblem::k)
      .def_rw("mode", &weave::GemmProblem::mode)
      .def_rw("scale_layout", &weave::GemmProblem::scale_layout)
      .def_rw("out_dtype", &weave::GemmProblem::out_dtype);
  nb::class_<weave::GemmPlanOverrides>(m, "GemmPlanOverrides")
      .def(nb::init<>())
      .def_rw("block_m", &weave::GemmPlanOverrides::block_m)
      .def_rw("block_n", &weave::GemmPlanOverrides::block_n)
      .def_rw("grid", &weave::GemmPlanOverrides::grid)
      .def_rw("split_k", &weave::GemmPlanOverrides::split_k)
      .def_rw("group_rows", &weave::GemmPlanOverrides::group_rows)
      .def_prop_rw(
          "mx_route", [](const weave::GemmPlanOverrides& o) { return static_cast<int>(o.mx_route); },
          [](weave::GemmPlanOverrides& o, int r) {
            if (r < 0 || r > 2) throw nb::value_error("mx_route must be 0 (auto), 1 (native) or 2 (bf16)");
            o.mx_route = static_cast<weave::MxRoute>(r);
          })
      .def_prop_rw(
          "scale_a_route", [](const weave::GemmPlanOverrides& o) { return static_cast<int>(o.scale_a_route); },
          [](weave::GemmPlanOverrides& o, int r) {
            if (r < 0 || r > 2)
              throw nb::value_error("scale_a_route must be 0 (auto), 1 (as-given) or 2 (mn-major-copy)");
            o.scale_a_route = static_cast<weave::ScaleARoute>(r);
          });
  nb::class_<weave::GemmPlan>(m, "GemmPlan")
      .def_ro("block_m", &weave::GemmPlan::block_m)
      .def_ro("block_n", &weave::GemmPlan::block_n)
      .def_ro("block_k", &weave::GemmPlan::block_k)
      .def_ro("stages", &weave::GemmPlan::stages)
      .def_ro("cluster", &weave::GemmPlan::cluster)
      .def_ro("grid", &weave::GemmPlan::grid)
      .def_ro("tiles", &weave::GemmPlan::tiles)
      .def_ro("split_k", &weave::GemmPlan::split_k)
      .def_ro("group_rows", &weave::GemmPlan::group_rows)
      .def_ro("gemv", &weave::GemmPlan::gemv)
      .def_ro("mx_dequant", &weave::GemmPlan::mx_dequant)
      .def_ro("fallback_kernel", &weave::GemmPlan::fallback_kernel)
      .def_ro("scale_a_mn_copy", &weave::GemmPlan::scale_a_mn_copy)
      .def_ro("kernel", &weave::GemmPlan::kernel)
      .def_ro("reason", &weave::GemmPlan::reason);
  m.def("gemm_validate_problem", &weave::gemm_validate_problem, "problem"_a);
  m.def("gemm_plan", &weave::gemm_plan, "problem"_a, "num_sms"_a, "overrides"_a);

  nb::class_<weave::Gemm>(m, "Gemm")
      .def("__init__",
           [](weave::Gemm* self, const weave::GemmProblem& p, const weave::TensorView& a, const weave::TensorView& b,
              const weave::TensorView& sa, const weave::TensorView& sb, const weave::TensorView& c,
              const weave::GemmPlanOverrides& o) { new (self) weave::Gemm(p, a, b, weave::GemmScales{sa, sb}, c, o); },
           "problem"_a, "a"_a, "b"_a, "scale_a"_a, "scale_b"_a, "c"_a, "overrides"_a)
      .def_prop_ro("plan", &weave::Gemm::plan, nb::rv_policy::copy)
      .def("set_operands",
           [](weave::Gemm& g, const weave::TensorView& a, const weave::TensorView& b, const weave::TensorView& sa,
              const weave::TensorView& sb, const weave::TensorView& c) {
             g.set_operands(a, b, weave::GemmScales{sa, sb}, c);
           })
      .def_prop_ro("workspace_bytes", &weave::Gemm::workspace_bytes)
      .def_prop_ro("workspace_purpose", &weave::Gemm::workspace_purpose)
      .def("set_workspace", [](weave::Gemm& g, std::uintptr_t p, std::size_t bytes) {
        g.set_workspace(reinterpret_cast<void*>(p), bytes);
      })
      .def("run", [](const weave::Gemm& g, std::uintptr_t stream) { g.run(as_stream(stream)); }, "stream"_a,
           nb::call_guard<nb::gil_scoped_release>())
      .def("check", &weave::Gemm::check);

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

  nb::class_<weave::DeviceInfo>(m, "DeviceInfo")
      .def_ro("ordinal", &weave::DeviceInfo::ordinal)
      .def_ro("name", &weave::DeviceInfo::name)
      .def_ro("cc_major", &weave::DeviceInfo::cc_major)
      .def_ro("cc_minor", &weave::DeviceInfo::cc_minor)
      .def_ro("sms", &weave::DeviceInfo::sms)
      .def_ro("l2_bytes", &weave::DeviceInfo::l2_bytes)
      .def_ro("mem_bytes", &weave::DeviceInfo::mem_bytes)
      .def_ro("pci_bus_id", &weave::DeviceInfo::pci_bus_id)
      .def("is_hopper", &weave::DeviceInfo::is_hopper);
  m.def("list_devices", &weave::list_devices);
  m.def("no_gpu_reason", &weave::no_gpu_reason);
  m.def("transport_availability", &weave::transport_availability, "devices"_a);

  // mxfp8 raw scale bytes [rows, k_groups] -> the packed uint32 words [ceil(K/128), rows] (bytes).
  m.def(
      "pack_mxfp8_scales",
      [](nb::bytes raw, int64_t rows, int64_t k_groups) {
        if (rows < 0 || k_groups < 0 || static_cast<int64_t>(raw.size()) != rows * k_groups)
          throw_arg("pack_mxfp8_scales: raw must hold rows * k_groups = " + std::to_string(rows * k_groups) +
                    " bytes (got " + std::to_string(raw.size()) + ")");
        std::vector<uint32_t> w =
            weave::ref::pack_mxfp8_scales(reinterpret_cast<const uint8_t*>(raw.c_str()), rows, k_groups);
        return nb::bytes(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(uint32_t));
      },
      "raw"_a, "rows"_a, "k_groups"_a);

  // A DLPack producer (anything nanobind's ndarray accepts) described as plain values:
  // (ptr, dlpack type code, bits, lanes, shape, strides in elements, device type, device id).
  m.def("dlpack_describe", [](nb::ndarray<nb::ro> a) {
    std::vector<int64_t> shape, strides;
    for (size_t i = 0; i < a.ndim(); ++i) {
      shape.push_back(static_cast<int64_t>(a.shape(i)));
      strides.push_back(static_cast<int64_t>(a.stride(i)));
    }
    const auto dt = a.dtype();
    return nb::make_tuple(reinterpret_cast<std::uintptr_t>(a.data()), static_cast<int>(dt.code),
                          static_cast<int>(dt.bits), static_cast<int>(dt.lanes), shape, strides, a.device_type(),
                          a.device_id());
  });

  m.def("nccl_runtime_version", [] {
    int v = 0;
    ncclGetVersion(&v);
    return v;
  });
  m.attr("nccl_build_version") = WEAVE_NCCL_BUILD_VERSION;

  weave_py::bind_fused(m);
  weave_py::bind_shared(m);
  weave_py::bind_presets(m);
}
