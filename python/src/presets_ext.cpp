// weave._weave binding of the model preset table (include/weave/presets.hpp) and of the decoder
// layer table (include/weave/layer_presets.hpp): rows as plain dicts of Python values, so
// python/weave/_presets.py reads the library's tables, never a copy.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include <string>

#include "ext_common.hpp"
#include "weave/layer_presets.hpp"
#include "weave/presets.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace weave_py {
namespace {

nb::dict preset_dict(const weave::ModelPreset& p) {
  nb::list quants, ms;
  for (const weave::ScaleMode q : p.quants) quants.append(std::string(weave::to_string(q)));
  for (const std::int64_t m : p.ms) ms.append(m);
  nb::dict d;
  d["name"] = std::string(p.name);
  d["op"] = std::string(weave::to_string(p.op));
  d["n"] = p.n;
  d["k"] = p.k;
  d["quants"] = nb::tuple(quants);
  d["out"] = std::string(weave::to_string(p.out));
  d["ms"] = nb::tuple(ms);
  d["summary"] = std::string(p.summary);
  d["source"] = std::string(p.source);
  return d;
}

// The quant by name, or the preset's default for "".
weave::ScaleMode quant_of(const weave::ModelPreset& p, const std::string& name) {
  if (name.empty()) return p.quants.front();
  const auto q = weave::parse_scale_mode(name);
  if (!q) throw_arg("quant '" + name + "': expected bf16, ptpc, blockscale or mxfp8");
  return *q;
}

nb::dict layer_dict(const weave::LayerPreset& l) {
  nb::list quants, ms, gemms;
  for (const weave::ScaleMode q : l.quants) quants.append(std::string(weave::to_string(q)));
  for (const std::int64_t m : l.ms) ms.append(m);
  for (const weave::LayerGemm& g : l.gemms) {
    nb::dict d;
    d["name"] = std::string(g.name);
    d["n"] = g.n;
    d["k"] = g.k;
    d["split"] = std::string(weave::to_string(g.split));
    d["units"] = g.units;
    d["parts"] = g.parts;
    d["source"] = std::string(g.source);
    gemms.append(d);
  }
  nb::dict d;
  d["name"] = std::string(l.name);
  d["gemms"] = nb::tuple(gemms);
  d["quants"] = nb::tuple(quants);
  d["ms"] = nb::tuple(ms);
  d["summary"] = std::string(l.summary);
  d["left_out"] = std::string(l.left_out);
  return d;
}

weave::ScaleMode layer_quant_of(const weave::LayerPreset& l, const std::string& name) {
  if (name.empty()) return l.quants.front();
  const auto q = weave::parse_scale_mode(name);
  if (!q) throw_arg("quant '" + name + "': expected bf16, ptpc, blockscale or mxfp8");
  return *q;
}

}  // namespace

void bind_presets(nb::module_& m) {
  m.def("model_presets", [] {
    nb::list out;
    for (const weave::ModelPreset& p : weave::model_presets()) out.append(preset_dict(p));
    return out;
  });
  m.def("model_preset", [](const std::string& name) { return preset_dict(weave::model_preset(name)); }, "name"_a);
  m.def(
      "shard_model_preset",
      [](const std::string& name, int world, const std::string& quant) {
        const weave::ModelPreset& p = weave::model_preset(name);
        const weave::PresetShard s = weave::shard_model_preset(p, world, quant_of(p, quant));
        nb::dict d;
        d["n"] = s.n;
        d["k"] = s.k;
        d["world"] = s.world;
        d["quant"] = std::string(weave::to_string(s.quant));
        return d;
      },
      "name"_a, "world"_a, "quant"_a);
  m.def("layer_presets", [] {
    nb::list out;
    for (const weave::LayerPreset& l : weave::layer_presets()) out.append(layer_dict(l));
    return out;
  });
  m.def("layer_preset", [](const std::string& name) { return layer_dict(weave::layer_preset(name)); }, "name"_a);
  m.def(
      "shard_layer_preset",
      [](const std::string& name, int world, const std::string& quant) {
        const weave::LayerPreset& l = weave::layer_preset(name);
        const weave::ScaleMode q = layer_quant_of(l, quant);
        nb::list out;
        for (const weave::LayerGemmShard& s : weave::shard_layer_preset(l, world, q)) {
          nb::dict d;
          d["name"] = std::string(s.name);
          d["n"] = s.n;
          d["k"] = s.k;
          d["split"] = std::string(weave::to_string(s.split));
          out.append(d);
        }
        nb::dict d;
        d["quant"] = std::string(weave::to_string(q));
        d["gemms"] = nb::tuple(out);
        return d;
      },
      "name"_a, "world"_a, "quant"_a);
}

}  // namespace weave_py
