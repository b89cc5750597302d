// weave::create_sharing_window on any comm::Group (the Communicator's, or the emulated world's in
// the tests): every op's Impl is built (validated and agreed), each adds its regions under its own
// prefix to one layout, one window is made, and every op attaches to it.
#pragma once
#include "comm/group.hpp"
#include "weave/shared_window.hpp"

namespace weave::fused {

SharedWindowOps create_sharing(comm::Group& g, const SharedWindowConfigs& configs);

}  // namespace weave::fused
