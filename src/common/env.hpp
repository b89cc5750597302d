// Typed reads of WEAVE_* environment variables, with the variable named in the error when a value
// does not parse.
#pragma once
#include <cstdint>
#include <string>

namespace weave::env {
std::string get_string(const char* name, const std::string& fallback);
int64_t get_int(const char* name, int64_t fallback);      // throws kInvalidArgument if not an integer
double get_double(const char* name, double fallback);     // throws kInvalidArgument if not a number
bool get_bool(const char* name, bool fallback);           // 0/1/true/false/on/off
}  // namespace weave::env
