#include "gemm/pdl_flags.hpp"

#include <cstdio>

#include "common/check.hpp"
#include "common/env.hpp"
#include "gemm/kernel_args.hpp"

namespace weave::gemm {

namespace {
// ring,late: on whole decode layers it kept trigger-at-start's TP 8 gain without its TP 2 loss
// (docs/perf/gemm.md "PDL variants on the decode chain").
constexpr uint32_t kDefaultFlags = kPdlWait | kPdlBIntoRing | kPdlTriggerLate;
constexpr int kMaxL2Blocks = 64;  // 64 K blocks of a 256-wide bf16 tile: 2 MB per CTA, already past any use
}  // namespace

uint32_t parse_pdl_flags(const std::string& text) {
  if (text.empty()) return kDefaultFlags;
  const size_t comma = text.find(',');
  const std::string prologue = text.substr(0, comma);
  const std::string trigger = comma == std::string::npos ? "" : text.substr(comma + 1);
  uint32_t flags = kPdlWait;
  int blocks = 0;
  char tail = 0;
  bool ok = true;
  if (prologue == "ring") flags |= kPdlBIntoRing;
  else if (prologue.rfind("l2:", 0) == 0 && std::sscanf(prologue.c_str() + 3, "%d%c", &blocks, &tail) == 1 &&
           blocks >= 1 && blocks <= kMaxL2Blocks)
    flags |= kPdlBIntoL2 | (static_cast<uint32_t>(blocks) << 8);
  else if (prologue != "none") ok = false;
  if (trigger == "start") flags |= kPdlTriggerAtStart;
  else if (trigger == "late") flags |= kPdlTriggerLate;
  else if (trigger != "exit") ok = false;
  WEAVE_EXPECT_ARG(ok, "WEAVE_GEMM_PDL='" << text << "': expected PROLOGUE,TRIGGER with PROLOGUE ring, l2:N (1 <= N <= "
                                          << kMaxL2Blocks << ") or none and TRIGGER start, late or exit");
  return flags;
}

uint32_t pdl_flags_for_launch() {
  static const uint32_t flags = parse_pdl_flags(env::get_string("WEAVE_GEMM_PDL", ""));
  return flags;
}

std::string describe_pdl_flags(uint32_t flags) {
  std::string out = (flags & kPdlBIntoRing) ? "ring"
                    : (flags & kPdlBIntoL2) ? "l2:" + std::to_string(flags >> 8)
                                            : "none";
  out += (flags & kPdlTriggerAtStart) ? ",start" : (flags & kPdlTriggerLate) ? ",late" : ",exit";
  return out;
}

}  // namespace weave::gemm
