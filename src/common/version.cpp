#include "weave/version.hpp"

namespace weave {

const char* version() noexcept { return WEAVE_VERSION_STRING; }

}  // namespace weave
