// The launch attribute of programmatic dependent launch (PDL): a kernel launched with it may start
// before the previous kernel on its stream has finished, and must griddepcontrol.wait before it
// touches what that kernel writes (hopper/ptx/griddepcontrol.cuh, docs/memory_ordering.md "pdl").
#pragma once
#include <cuda_runtime.h>

namespace weave::hopper {

inline cudaLaunchAttribute programmatic_serialization_attribute() {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  return attr;
}

}  // namespace weave::hopper
