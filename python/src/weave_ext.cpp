// weave._weave: the nanobind layer over the public C++ API (include/weave/). It sees raw pointers,
// shapes and strides only; the Python package (python/weave/) turns torch tensors,
// __cuda_array_interface__ and DLPack producers into them, resolves streams and owns the operands'
// lifetimes. Every weave::Error becomes the Python weave.Error built by the factory the package
// registers (status, message, call, location). Calls that may block on other ranks or on the GPU
// release the GIL. This file defines the module and the error translation; each part of the API is
// bound in its own file (types_ext, gemm_ext, comm_ext, device_ext, fused_ext, shared_ext,
// presets_ext).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <exception>
#include <string>

#include "weave/error.hpp"

#include "ext_common.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

PyObject* g_error_factory = nullptr;  // weave._errors.from_cpp; leaked on purpose (outlives teardown)

}  // namespace

NB_MODULE(_weave, m) {
  m.doc() = "weave C++ API (internal; use the weave package)";
  // weave.ops turns nanobind's exit-time leak report off: torch's op registry keeps weave's custom
  // op functions (and through their modules weave's objects) alive past nanobind's teardown check.
  m.def("_set_leak_warnings", [](bool on) { nb::set_leak_warnings(on); });

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

  weave_py::bind_types(m);
  weave_py::bind_gemm(m);
  weave_py::bind_comm(m);
  weave_py::bind_device(m);
  weave_py::bind_fused(m);
  weave_py::bind_shared(m);
  weave_py::bind_presets(m);
}
