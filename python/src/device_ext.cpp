// weave._weave bindings of the GPUs this process sees (include/weave/device.hpp) and of a DLPack
// producer described as plain values.
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

#include "weave/device.hpp"
#include "weave/transport.hpp"

#include "ext_common.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace weave_py {

void bind_device(nb::module_& m) {
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
}

}  // namespace weave_py
