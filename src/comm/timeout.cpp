#include "comm/timeout.hpp"

#include "common/check.hpp"
#include "common/env.hpp"

namespace weave::comm {

// Every wait is bounded: an infinite, NaN or absurd timeout is refused, not converted (a double
// past 2^64 ns converted to uint64_t for the device waits is undefined behaviour).
double resolve_timeout(double requested) {
  WEAVE_EXPECT_ARG(!(requested < 0) && requested <= kMaxTimeoutS,
                   "CommOptions::timeout_s must be 0 (the default: WEAVE_COMM_TIMEOUT_S or 10 s) or a finite number of "
                   "seconds in (0, "
                       << kMaxTimeoutS << "], got " << requested);
  if (requested > 0) return requested;
  const double env = env::get_double("WEAVE_COMM_TIMEOUT_S", 10.0);
  WEAVE_EXPECT_ARG(env > 0 && env <= kMaxTimeoutS,
                   "WEAVE_COMM_TIMEOUT_S must be a finite number of seconds in (0, " << kMaxTimeoutS << "], got "
                                                                                    << env);
  return env;
}

}  // namespace weave::comm
