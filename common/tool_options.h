/// @file
/// Reading the options of the command-line tools (datasets/): a flag's value as a
/// positive integer, or a UserError naming the flag and the value.
#pragma once
#include <exception>
#include <string>

#include "common/error.h"

namespace gpt {

/// `value` of option `flag` (as "--batch") as an int above 0: all of it must be the
/// number; otherwise a UserError "FLAG: 'VALUE' is not a positive integer".
inline int positive_int_option(const std::string& flag, const std::string& value) {
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;  // not a number, or out of an int's range
  }
  if (used != value.size() || v <= 0) fail(flag + ": '" + value + "' is not a positive integer");
  return v;
}

}  // namespace gpt
