// The rules a GEMM problem breaks, named after the options that set them, for the subcommands
// that take a GEMM shape (`weave plan gemm`, `weave bench gemm`). CPU only.
#pragma once
#include <string>

#include "weave/gemm.hpp"

namespace weave::cli {

// gemm_validate_problem's "; "-separated rules, each prefixed by the options it is about:
// "-k 2000 --quant blockscale: k must be a multiple of 128 for blockscale ...". `shape_option`
// replaces "-m M", "-n N" and "-k K" where the shape came from elsewhere ("--shapes 128x128x100").
std::string name_gemm_rules(const std::string& rules, const GemmProblem& problem, const std::string& shape_option = "");

}  // namespace weave::cli
