// One-line diagnostics to stderr, prefixed "weave[<level>]". WEAVE_LOG_LEVEL=error|warn|info|debug
// (default info). Used for decisions a user must be able to see (a fallback and why).
#pragma once
#include <sstream>
#include <string>

namespace weave::log {
enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };
bool enabled(Level level);
void write(Level level, const std::string& text);
}  // namespace weave::log

#define WEAVE_LOG(level, msg)                                               \
  do {                                                                      \
    if (::weave::log::enabled(::weave::log::Level::level)) {                \
      std::ostringstream weave_log_os_;                                     \
      weave_log_os_ << msg;                                                 \
      ::weave::log::write(::weave::log::Level::level, weave_log_os_.str()); \
    }                                                                       \
  } while (0)
