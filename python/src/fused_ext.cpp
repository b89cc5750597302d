// weave._weave bindings of the fused operators (include/weave/gemm_all_gather.hpp,
// gemm_all_reduce.hpp, gemm_reduce_scatter.hpp, all_gather_gemm.hpp): configs, plans, validation,
// window sizes and the ops. GemmReduceScatter's config and plan are GemmAllReduce's less the decode
// mode and the gather leg, so the two share their binding code (bind_config, bind_ar_plan below);
// AllGatherGemm's config has GemmAllGather's fields. The Python layer
// (python/weave/_fused.py) turns tensors into TensorViews and checks arguments first.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "ext_common.hpp"
#include "weave/all_gather_gemm.hpp"
#include "weave/gemm_all_gather.hpp"
#include "weave/gemm_all_reduce.hpp"
#include "weave/gemm_reduce_scatter.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace weave_py {

namespace {

template <class Op, class Config>
void bind_op_common(nb::class_<Op>& c) {
  c.def("__init__",
        [](Op* self, PyCommunicator& comm, const Config& cfg) {
          weave::Communicator& cm = comm.get();
          nb::gil_scoped_release release;
          new (self) Op(cm, cfg);
        },
        "comm"_a, "config"_a, nb::keep_alive<1, 2>())
      .def_prop_ro("config", &Op::config, nb::rv_policy::copy)
      .def("plan", &Op::plan, "m"_a)
      .def("describe", &Op::describe)
      .def("run",
           [](Op& op, int64_t m, const weave::TensorView& a, const weave::TensorView& b, const weave::TensorView& sa,
              const weave::TensorView& sb, std::uintptr_t stream, const std::optional<weave::TensorView>& out) {
             if (out) op.run(m, a, b, weave::GemmScales{sa, sb}, *out, as_stream(stream));
             else op.run(m, a, b, weave::GemmScales{sa, sb}, as_stream(stream));
           },
           "m"_a, "a"_a, "b"_a, "scale_a"_a, "scale_b"_a, "stream"_a, "out"_a = nb::none(),
           nb::call_guard<nb::gil_scoped_release>())
      .def("output_ptr", [](const Op& op, int64_t m) { return reinterpret_cast<std::uintptr_t>(op.output(m).data); },
           "m"_a)
      .def_prop_ro("last_mode", &Op::last_mode)
      .def("check", &Op::check)
      .def("self_test", [](Op& op, int64_t m) { return op.self_test(m); }, "m"_a,
           nb::call_guard<nb::gil_scoped_release>());
}

// The fields every fused config has (GemmAllGatherConfig, GemmAllReduceConfig,
// GemmReduceScatterConfig, AllGatherGemmConfig); the caller binds the rest on the returned class.
template <class Config>
nb::class_<Config> bind_config(nb::module_& m, const char* name) {
  nb::class_<Config> c(m, name);
  c.def(nb::init<>())
      .def_rw("n", &Config::n)
      .def_rw("k", &Config::k)
      .def_rw("m_max", &Config::m_max)
      .def_rw("quant", &Config::quant)
      .def_rw("scale_layout", &Config::scale_layout)
      .def_rw("mode", &Config::mode)
      .def_rw("max_sms", &Config::max_sms)
      .def_prop_rw(
          "mx_route", [](const Config& cfg) { return static_cast<int>(cfg.mx_route); },
          [](Config& cfg, int r) {
            if (r < 0 || r > 2) throw nb::value_error("mx_route must be 0 (auto), 1 (native) or 2 (bf16)");
            cfg.mx_route = static_cast<weave::MxRoute>(r);
          });
  return c;
}

// GemmAllReduce's and GemmReduceScatter's config fields past bind_config's.
template <class Config>
nb::class_<Config> bind_ar_config(nb::module_& m, const char* name) {
  auto c = bind_config<Config>(m, name);
  c.def_rw("calibration", &Config::calibration).def_rw("exact_own", &Config::exact_own).def_rw("chunks", &Config::chunks);
  return c;
}

// The fields GemmAllReducePlan and GemmReduceScatterPlan share (all but GemmAllReducePlan's
// bytes_ag); the caller binds the rest on the returned class.
template <class Plan>
nb::class_<Plan> bind_ar_plan(nb::module_& m, const char* name) {
  nb::class_<Plan> c(m, name);
  c.def_ro("mode", &Plan::mode)
      .def_ro("block_m", &Plan::block_m)
      .def_ro("block_n", &Plan::block_n)
      .def_ro("tiles", &Plan::tiles)
      .def_ro("waves", &Plan::waves)
      .def_ro("grid", &Plan::grid)
      .def_ro("band_blocks", &Plan::band_blocks)
      .def_ro("chunks", &Plan::chunks)
      .def_ro("chunk_blocks", &Plan::chunk_blocks)
      .def_ro("rounds", &Plan::rounds)
      .def_ro("bytes_rs", &Plan::bytes_rs)
      .def_ro("window_bytes", &Plan::window_bytes)
      .def_ro("model_gemm_us", &Plan::model_gemm_us)
      .def_ro("model_comm_us", &Plan::model_comm_us)
      .def_ro("model_split_us", &Plan::model_split_us)
      .def_ro("model_fused_us", &Plan::model_fused_us)
      .def_ro("reason", &Plan::reason);
  return c;
}

// The pure planner `plan` (no op, no GPU) as `name`, the machine as plain arguments.
template <class Config, class Plan>
void bind_planner(nb::module_& m, const char* name,
                  Plan (*plan)(const Config&, int, std::int64_t, const weave::FusedPlanMachine&)) {
  m.def(
      name,
      [plan](const Config& c, int world, int64_t rows, int num_sms, bool nvlink_domain, bool nccl) {
        return plan(c, world, rows, {num_sms, nvlink_domain, nccl, true});
      },
      "config"_a, "world"_a, "m"_a, "num_sms"_a, "nvlink_domain"_a, "nccl"_a);
}

}  // namespace

void bind_fused(nb::module_& m) {
  nb::enum_<weave::GemmAllReduceMode>(m, "GemmAllReduceMode")
      .value("AUTO", weave::GemmAllReduceMode::kAuto)
      .value("GEMM_ONLY", weave::GemmAllReduceMode::kGemmOnly)
      .value("SPLIT_NCCL", weave::GemmAllReduceMode::kSplitNccl)
      .value("SPLIT_LSA", weave::GemmAllReduceMode::kSplitLsa)
      .value("SPLIT_CE", weave::GemmAllReduceMode::kSplitCe)
      .value("FUSED", weave::GemmAllReduceMode::kFused)
      .value("DECODE", weave::GemmAllReduceMode::kDecode)
      .value("FUSED_RS", weave::GemmAllReduceMode::kFusedRs)
      .value("FUSED_CE", weave::GemmAllReduceMode::kFusedCe)
      .value("DECODE_FUSED", weave::GemmAllReduceMode::kDecodeFused);
  nb::enum_<weave::GemmReduceScatterMode>(m, "GemmReduceScatterMode")
      .value("AUTO", weave::GemmReduceScatterMode::kAuto)
      .value("GEMM_ONLY", weave::GemmReduceScatterMode::kGemmOnly)
      .value("SPLIT_NCCL", weave::GemmReduceScatterMode::kSplitNccl)
      .value("SPLIT_LSA", weave::GemmReduceScatterMode::kSplitLsa)
      .value("SPLIT_CE", weave::GemmReduceScatterMode::kSplitCe)
      .value("FUSED", weave::GemmReduceScatterMode::kFused);
  nb::enum_<weave::GemmAllGatherMode>(m, "GemmAllGatherMode")
      .value("AUTO", weave::GemmAllGatherMode::kAuto)
      .value("GEMM_ONLY", weave::GemmAllGatherMode::kGemmOnly)
      .value("SPLIT_NCCL", weave::GemmAllGatherMode::kSplitNccl)
      .value("SPLIT_LSA", weave::GemmAllGatherMode::kSplitLsa)
      .value("SPLIT_CE", weave::GemmAllGatherMode::kSplitCe)
      .value("FUSED_LSA", weave::GemmAllGatherMode::kFusedLsa)
      .value("FUSED_CE", weave::GemmAllGatherMode::kFusedCe);
  m.def("parse_gemm_all_reduce_mode", [](std::string_view s) { return weave::parse_gemm_all_reduce_mode(s); });
  m.def("parse_gemm_reduce_scatter_mode", [](std::string_view s) { return weave::parse_gemm_reduce_scatter_mode(s); });
  nb::enum_<weave::AllGatherGemmMode>(m, "AllGatherGemmMode")
      .value("AUTO", weave::AllGatherGemmMode::kAuto)
      .value("GEMM_ONLY", weave::AllGatherGemmMode::kGemmOnly)
      .value("SPLIT_NCCL", weave::AllGatherGemmMode::kSplitNccl)
      .value("SPLIT_LSA", weave::AllGatherGemmMode::kSplitLsa)
      .value("SPLIT_CE", weave::AllGatherGemmMode::kSplitCe)
      .value("FUSED_CE", weave::AllGatherGemmMode::kFusedCe);
  m.def("parse_gemm_all_gather_mode", [](std::string_view s) { return weave::parse_gemm_all_gather_mode(s); });
  m.def("parse_all_gather_gemm_mode", [](std::string_view s) { return weave::parse_all_gather_gemm_mode(s); });
  m.def("name", [](weave::GemmAllReduceMode v) { return std::string(weave::to_string(v)); });
  m.def("name", [](weave::GemmReduceScatterMode v) { return std::string(weave::to_string(v)); });
  m.def("name", [](weave::GemmAllGatherMode v) { return std::string(weave::to_string(v)); });
  m.def("name", [](weave::AllGatherGemmMode v) { return std::string(weave::to_string(v)); });

  bind_ar_config<weave::GemmAllReduceConfig>(m, "GemmAllReduceConfig").def_rw("allow_pdl",
                                                                             &weave::GemmAllReduceConfig::allow_pdl);
  bind_ar_config<weave::GemmReduceScatterConfig>(m, "GemmReduceScatterConfig");
  bind_config<weave::GemmAllGatherConfig>(m, "GemmAllGatherConfig")
      .def_rw("calibration", &weave::GemmAllGatherConfig::calibration)
      .def_rw("out_dtype", &weave::GemmAllGatherConfig::out_dtype);
  bind_config<weave::AllGatherGemmConfig>(m, "AllGatherGemmConfig")
      .def_rw("out_dtype", &weave::AllGatherGemmConfig::out_dtype)
      .def_rw("calibration", &weave::AllGatherGemmConfig::calibration);

  bind_ar_plan<weave::GemmAllReducePlan>(m, "GemmAllReducePlan")
      .def_ro("bytes_ag", &weave::GemmAllReducePlan::bytes_ag);
  bind_ar_plan<weave::GemmReduceScatterPlan>(m, "GemmReduceScatterPlan");
  nb::class_<weave::GemmAllGatherPlan>(m, "GemmAllGatherPlan")
      .def_ro("mode", &weave::GemmAllGatherPlan::mode)
      .def_ro("block_m", &weave::GemmAllGatherPlan::block_m)
      .def_ro("block_n", &weave::GemmAllGatherPlan::block_n)
      .def_ro("tiles", &weave::GemmAllGatherPlan::tiles)
      .def_ro("waves", &weave::GemmAllGatherPlan::waves)
      .def_ro("grid", &weave::GemmAllGatherPlan::grid)
      .def_ro("chunks", &weave::GemmAllGatherPlan::chunks)
      .def_ro("bytes_per_peer", &weave::GemmAllGatherPlan::bytes_per_peer)
      .def_ro("window_bytes", &weave::GemmAllGatherPlan::window_bytes)
      .def_ro("model_gemm_us", &weave::GemmAllGatherPlan::model_gemm_us)
      .def_ro("model_comm_us", &weave::GemmAllGatherPlan::model_comm_us)
      .def_ro("model_split_us", &weave::GemmAllGatherPlan::model_split_us)
      .def_ro("model_fused_us", &weave::GemmAllGatherPlan::model_fused_us)
      .def_ro("gemm_gemv", &weave::GemmAllGatherPlan::gemm_gemv)
      .def_ro("gemm_split_k", &weave::GemmAllGatherPlan::gemm_split_k)
      .def_ro("reason", &weave::GemmAllGatherPlan::reason);
  nb::class_<weave::AllGatherGemmPlan>(m, "AllGatherGemmPlan")
      .def_ro("mode", &weave::AllGatherGemmPlan::mode)
      .def_ro("gemm_kernel", &weave::AllGatherGemmPlan::gemm_kernel)
      .def_ro("gemm_reason", &weave::AllGatherGemmPlan::gemm_reason)
      .def_ro("block_m", &weave::AllGatherGemmPlan::block_m)
      .def_ro("block_n", &weave::AllGatherGemmPlan::block_n)
      .def_ro("gemm_split_k", &weave::AllGatherGemmPlan::gemm_split_k)
      .def_ro("rows", &weave::AllGatherGemmPlan::rows)
      .def_ro("tiles", &weave::AllGatherGemmPlan::tiles)
      .def_ro("waves", &weave::AllGatherGemmPlan::waves)
      .def_ro("grid", &weave::AllGatherGemmPlan::grid)
      .def_ro("bytes_per_peer", &weave::AllGatherGemmPlan::bytes_per_peer)
      .def_ro("window_bytes", &weave::AllGatherGemmPlan::window_bytes)
      .def_ro("model_gemm_us", &weave::AllGatherGemmPlan::model_gemm_us)
      .def_ro("model_comm_us", &weave::AllGatherGemmPlan::model_comm_us)
      .def_ro("model_split_us", &weave::AllGatherGemmPlan::model_split_us)
      .def_ro("model_fused_us", &weave::AllGatherGemmPlan::model_fused_us)
      .def_ro("reason", &weave::AllGatherGemmPlan::reason);

  m.def("gemm_all_reduce_validate", &weave::GemmAllReduce::validate, "config"_a, "world"_a);
  m.def("gemm_reduce_scatter_validate", &weave::GemmReduceScatter::validate, "config"_a, "world"_a);
  m.def("gemm_all_gather_validate", &weave::GemmAllGather::validate, "config"_a, "world"_a);
  m.def("all_gather_gemm_validate", &weave::AllGatherGemm::validate, "config"_a, "world"_a);
  m.def("gemm_all_reduce_window_bytes", &weave::gemm_all_reduce_window_bytes, "config"_a, "world"_a);
  m.def("gemm_reduce_scatter_window_bytes", &weave::gemm_reduce_scatter_window_bytes, "config"_a, "world"_a);
  m.def("gemm_all_gather_window_bytes", &weave::gemm_all_gather_window_bytes, "config"_a, "world"_a);
  m.def("all_gather_gemm_window_bytes", &weave::all_gather_gemm_window_bytes, "config"_a, "world"_a);
  bind_planner(m, "gemm_all_reduce_plan", &weave::gemm_all_reduce_plan);
  bind_planner(m, "gemm_reduce_scatter_plan", &weave::gemm_reduce_scatter_plan);
  bind_planner(m, "gemm_all_gather_plan", &weave::gemm_all_gather_plan);
  bind_planner(m, "all_gather_gemm_plan", &weave::all_gather_gemm_plan);

  nb::class_<weave::GemmAllReduce> ar(m, "GemmAllReduce");
  bind_op_common<weave::GemmAllReduce, weave::GemmAllReduceConfig>(ar);
  nb::class_<weave::GemmReduceScatter> rs(m, "GemmReduceScatter");
  bind_op_common<weave::GemmReduceScatter, weave::GemmReduceScatterConfig>(rs);
  nb::class_<weave::GemmAllGather> ag(m, "GemmAllGather");
  bind_op_common<weave::GemmAllGather, weave::GemmAllGatherConfig>(ag);
  ag.def("self_test_b",
         [](weave::GemmAllGather& op, int64_t m, const weave::TensorView& b, const weave::TensorView& sb) {
           return op.self_test(m, b, sb);
         },
         "m"_a, "b"_a, "scale_b"_a, nb::call_guard<nb::gil_scoped_release>());
  // AllGatherGemm's views into its window past output(m): the gathered A and its scales, and this
  // rank's slot of them (the zero-copy input). An empty view (bf16's scales) has ptr 0.
  nb::class_<weave::AllGatherGemm> agm(m, "AllGatherGemm");
  bind_op_common<weave::AllGatherGemm, weave::AllGatherGemmConfig>(agm);
  agm.def("gathered_a", &weave::AllGatherGemm::gathered_a, "m"_a)
      .def("gathered_scale_a", &weave::AllGatherGemm::gathered_scale_a, "m"_a)
      .def("input", &weave::AllGatherGemm::input, "m"_a)
      .def("input_scales", &weave::AllGatherGemm::input_scales, "m"_a);
}

}  // namespace weave_py
