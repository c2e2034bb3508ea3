// Errors. A UserError is bad input (config, data, checkpoint): the binary prints
// its message and exits with status 2. Anything else is a bug and exits 1.
#pragma once
#include <cstdio>
#include <stdexcept>
#include <string>

namespace gpt {

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws a UserError carrying `message` (name the file, key or value and the reason).
[[noreturn]] inline void fail(const std::string& message) { throw UserError(message); }

inline void require(bool condition, const std::string& message) {
  if (!condition) fail(message);
}

// Runs `body` and turns exceptions into exit codes: 2 for bad input, 1 for bugs.
template <class F>
int run_main(const char* program, F&& body) {
  try {
    return body();
  } catch (const UserError& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace gpt
