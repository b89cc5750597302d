#include "common/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace weave::log {

static Level threshold() {
  static const Level level = [] {
    const char* env = std::getenv("WEAVE_LOG_LEVEL");
    if (!env) return Level::kInfo;
    if (!std::strcmp(env, "error")) return Level::kError;
    if (!std::strcmp(env, "warn")) return Level::kWarn;
    if (!std::strcmp(env, "debug")) return Level::kDebug;
    return Level::kInfo;
  }();
  return level;
}

bool enabled(Level level) { return static_cast<int>(level) <= static_cast<int>(threshold()); }

void write(Level level, const std::string& text) {
  static std::mutex mutex;
  static const char* names[] = {"error", "warn", "info", "debug"};
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "weave[%s] %s\n", names[static_cast<int>(level)], text.c_str());
}

}  // namespace weave::log
