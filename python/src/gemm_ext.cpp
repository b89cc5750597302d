// weave._weave bindings of the local GEMM (include/weave/gemm.hpp): problems, overrides, plans, the
// op, and the mxfp8 scale packing (include/weave/quant.hpp).
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

#include "weave/gemm.hpp"
#include "weave/quant.hpp"
#include "weave/quantize.hpp"

#include "ext_common.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace weave_py {

void bind_gemm(nb::module_& m) {
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
      .def_rw("cluster", &weave::GemmPlanOverrides::cluster)
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
          })
      .def_prop_rw(
          "decode_route", [](const weave::GemmPlanOverrides& o) { return static_cast<int>(o.decode_route); },
          [](weave::GemmPlanOverrides& o, int r) {
            if (r < 0 || r > 2) throw nb::value_error("decode_route must be 0 (auto), 1 (gemv) or 2 (tiles)");
            o.decode_route = static_cast<weave::DecodeRoute>(r);
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
      .def("set_allow_pdl", &weave::Gemm::set_allow_pdl, "allow"_a)
      .def_prop_ro("allow_pdl", &weave::Gemm::allow_pdl)
      .def("set_workspace", [](weave::Gemm& g, std::uintptr_t p, std::size_t bytes) {
        g.set_workspace(reinterpret_cast<void*>(p), bytes);
      })
      .def("run", [](const weave::Gemm& g, std::uintptr_t stream) { g.run(as_stream(stream)); }, "stream"_a,
           nb::call_guard<nb::gil_scoped_release>())
      .def("check", &weave::Gemm::check);

  // Activation quantisation on the GPU (include/weave/quantize.hpp).
  m.def(
      "quantize_rows",
      [](weave::ScaleMode mode, const weave::TensorView& x, const weave::TensorView& q, const weave::TensorView& s,
         std::uintptr_t stream) { weave::quantize_rows(mode, x, q, s, as_stream(stream)); },
      "mode"_a, "x"_a, "q"_a, "scales"_a, "stream"_a);
  m.def("quantize_group", &weave::quantize_group, "mode"_a, "k"_a);

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

}

}  // namespace weave_py
