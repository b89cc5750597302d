// Test support: run `fn`, expect it to throw weave::Error with `status`, and return the message
// (an ADD_FAILURE and "" when nothing, or something else, was thrown).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "weave/error.hpp"

namespace weave::test {

template <typename Fn>
std::string error_of(Fn fn, Status status = Status::kInvalidArgument) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "expected a weave::Error";
  return "";
}

}  // namespace weave::test
