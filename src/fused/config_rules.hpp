// The rules a fused operator's validate() collects, one sentence each, "; "-joined: the ones every
// operator's config shares are written once here (world, m_max, max_sms, the output dtype), each
// operator adds its own with rule().
#pragma once
#include <cstdint>
#include <sstream>
#include <string>

#include "weave/types.hpp"
#include "weave/window_handle.hpp"

namespace weave::fused {

class ConfigRules {
 public:
  // Adds `why` when the rule is broken.
  void rule(bool ok, const std::string& why) {
    if (!ok) os_ << (os_.tellp() > 0 ? "; " : "") << why;
  }
  // world in 1..kMaxWorld, m_max in 1..2^20, max_sms in 0..1024.
  void world_and_sizes(int world, std::int64_t m_max, int max_sms) {
    rule(world >= 1 && world <= kMaxWorld,
         "world must be in 1.." + std::to_string(kMaxWorld) + ", got " + std::to_string(world));
    rule(m_max >= 1 && m_max <= (std::int64_t(1) << 20), "m_max must be in 1..1048576, got " + std::to_string(m_max));
    rule(max_sms >= 0 && max_sms <= 1024, "max_sms must be in 0..1024 (0: every SM), got " + std::to_string(max_sms));
  }
  // bf16 or fp32 output, and fp32 only for bf16 inputs.
  void out_dtype(ScaleMode quant, DType out) {
    rule(out == DType::kBF16 || out == DType::kF32, "out_dtype must be bf16 or fp32, got " + std::string(to_string(out)));
    rule(quant == ScaleMode::kBF16 || out == DType::kBF16, "fp8 modes (" + std::string(to_string(quant)) +
                                                               ") produce bf16 output, got out_dtype " +
                                                               std::string(to_string(out)));
  }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
};

}  // namespace weave::fused
