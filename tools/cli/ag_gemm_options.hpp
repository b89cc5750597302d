// What `weave plan ag-gemm` and `weave bench ag-gemm` share: weave::AllGatherGemm's shape and modes
// as the user types them, turned into a weave::AllGatherGemmConfig. Every rank r holds A_r [m, K]
// (m rows per rank) and the column shard B [N, K]; every rank computes [A_0; ...; A_{W-1}] B^T,
// [W m, N]. Every rule AllGatherGemm::validate reports comes back named after the option that
// sets it, as one Error(kInvalidArgument) (main() prints it and exits 2 before anything else is
// printed or any GPU is probed). --preset takes the column-parallel and replicated GEMMs of the
// decoder layer table (weave/layer_presets.hpp: "llama3-70b.gate_up_proj", ...): the layers whose
// input sequence parallelism all-gathers. CPU only (in weave_cli_args, so tests/cpu calls it).
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/preset_options.hpp"
#include "weave/all_gather_gemm.hpp"

namespace weave::cli {

// Defaults: Llama-3-70B's gate_up projection column-parallel over 8 ranks (N = 2 x 28672 / 8 =
// 7168 per rank, K = 8192), a few m per rank from decode-like to prefill-like.
struct AgGemmOptions {
  std::vector<std::int64_t> ms = {128, 1024, 2048, 4096};  // rows per rank, one row each
  std::int64_t n = 7168, k = 8192;
  std::int64_t m_max = 0;  // 0: the largest of ms
  std::string quant = "bf16";
  std::string layout = "raw";  // A's scales must be raw (they travel with their rows)
  std::string out = "bf16";
  std::string mode = "auto";
  std::string mx_route = "auto";
  std::string preset;  // --preset "<layer>.<gemm>" (bench: NAME[,NAME...]); the fused engines read it
  PresetTyped typed;   // the shape options as registered (which ones the user typed)
  bool many_presets = false;  // --preset may name several (a bench runs each in turn)
};

// Adds -m/--m, -n/--n, -k/--k, --m-max, --quant, --out, --preset, --mx-route (and --scale-layout /
// --mode when asked). `many`: --preset takes several names (a bench).
void add_ag_gemm_options(CLI::App& app, AgGemmOptions& o, bool with_layout, bool with_mode, bool many = false);

// The config of `o` for a world of `world` ranks; throws Error(kInvalidArgument) naming the
// option of every rule broken (an unknown name, an M above --m-max, an AllGatherGemm::validate rule).
AllGatherGemmConfig ag_gemm_config(const AgGemmOptions& o, int world);

// The shapes to run (the fused engines' shapes_of): `o` itself without --preset, else one per
// name, each with N (the column shard N / world; replicated: N), K, the quant (--quant, one the
// model ships, or the model's first) and bf16 out; -n, -k and --out are refused with a preset, a
// row-parallel GEMM is refused naming the op that takes it. Each shape checked by ag_gemm_config.
std::vector<AgGemmOptions> ag_gemm_shapes(const AgGemmOptions& o, int world);

// AllGatherGemm::validate's rules ("; "-separated) with each one prefixed by the options that set
// what it is about ("--n 100 ...: the gathered GEMM ..."); "" when `why` is "".
std::string name_ag_gemm_rules(const std::string& why, const AllGatherGemmConfig& c, int world);

}  // namespace weave::cli
