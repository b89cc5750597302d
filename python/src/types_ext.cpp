// weave._weave bindings of the element types, quantisation modes, transports and algorithms (with
// the C++ spellings the CLI accepts), and TensorView (include/weave/types.hpp, tensor.hpp).
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
#include "weave/tensor.hpp"
#include "weave/types.hpp"

#include "ext_common.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace weave_py {

namespace {

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

}  // namespace

void bind_types(nb::module_& m) {
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
      .def_prop_ro("dtype", [](const weave::TensorView& v) { return v.dtype; })
      .def_prop_ro("shape",
                   [](const weave::TensorView& v) {
                     return std::vector<int64_t>(v.shape.begin(), v.shape.begin() + v.rank);
                   })
      .def_prop_ro("strides",
                   [](const weave::TensorView& v) {
                     return std::vector<int64_t>(v.strides.begin(), v.strides.begin() + v.rank);
                   })
      .def("describe", &weave::TensorView::describe);
}

}  // namespace weave_py
