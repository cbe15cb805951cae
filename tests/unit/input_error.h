// The one-line InputError message a call throws, for bad-input tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "common/errors.h"

namespace ctitan {

// The InputError message `fn` throws; a test failure when it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

}  // namespace ctitan
