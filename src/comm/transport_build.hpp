// Which transports this build compiled in (the CMake options WEAVE_ENABLE_*), for code outside
// src/comm, which does not see those definitions. A constant of the build: no GPU is queried
// (transport_availability() in weave/transport.hpp also says whether the GPUs can run each).
#pragma once
#include "weave/transport.hpp"

namespace weave::comm {

bool transport_compiled_in(Transport t);

}  // namespace weave::comm
