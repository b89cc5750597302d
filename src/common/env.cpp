#include "common/env.hpp"

#include <cstdlib>
#include <string>

#include "common/check.hpp"

namespace weave::env {

std::string get_string(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : fallback;
}

int64_t get_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  WEAVE_EXPECT_ARG(end && *end == '\0',
                   "environment variable " << name << "='" << v << "': must be an integer");
  return x;
}

double get_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  double x = std::strtod(v, &end);
  WEAVE_EXPECT_ARG(end && *end == '\0',
                   "environment variable " << name << "='" << v << "': must be a number");
  return x;
}

bool get_bool(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  std::string s(v);
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  WEAVE_EXPECT_ARG(false, "environment variable " << name << "='" << v
                                                  << "': must be one of 0/1/true/false/on/off");
  return fallback;
}

}  // namespace weave::env
