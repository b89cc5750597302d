// The PDL behaviour of the tiled GEMM kernel when the caller allows PDL (weave::Gemm::
// set_allow_pdl): MainloopArgs::pdl_flags (gemm/kernel_args.hpp kPdl*).
#pragma once
#include <cstdint>
#include <string>

namespace weave::gemm {

// The flags a PDL launch of the tiled kernel carries: the default, or WEAVE_GEMM_PDL, a diagnostic
// read once per process: "PROLOGUE,TRIGGER" with PROLOGUE ring (B of the first stages into the
// ring before the wait), l2:N (B of the first N K blocks into L2) or none, and TRIGGER start
// (dependents may launch at once), late (the producer warp, after its last load) or exit (when the
// CTA exits). Default ring,late (measured best on decode layers). Raises kInvalidArgument naming
// the variable on any other value.
uint32_t pdl_flags_for_launch();
uint32_t parse_pdl_flags(const std::string& text);  // the same rule, for tests
std::string describe_pdl_flags(uint32_t flags);     // "ring,start" etc.

}  // namespace weave::gemm
