// Exit statuses (common/error.h): bad input exits 2 with "error:", a violated internal
// invariant exits 1 with "internal error:", as does any other exception. run_main's
// message goes to stderr; the test reads it back from a temporary file.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>

#include "common/error.h"

namespace {

struct Outcome {
  int status;
  std::string stderr_text;
};

template <class F>
Outcome run(F&& body) {
  std::fflush(stderr);
  const std::string path = std::string(GPT_TEST_SCRATCH_DIR) + "/test_errors_stderr.txt";
  const int saved = dup(fileno(stderr));
  REQUIRE(std::freopen(path.c_str(), "w", stderr) != nullptr);
  const int status = gpt::run_main("prog", body);
  std::fflush(stderr);
  dup2(saved, fileno(stderr));
  close(saved);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return {status, text.str()};
}

}  // namespace

TEST_CASE("errors: bad input exits 2, a broken invariant 1", "[config][errors]") {
  const Outcome user = run([]() -> int { gpt::require(false, "key 'lr': must be positive"); return 0; });
  CHECK(user.status == 2);
  CHECK(user.stderr_text == "prog: error: key 'lr': must be positive\n");

  const Outcome bug = run([]() -> int { gpt::invariant(false, "backward() needs a forward()"); return 0; });
  CHECK(bug.status == 1);
  CHECK(bug.stderr_text == "prog: internal error: backward() needs a forward()\n");

  // Too little memory is no bug: exit 2, said as such.
  const Outcome memory = run([]() -> int { throw std::bad_alloc(); });
  CHECK(memory.status == 2);
  CHECK(memory.stderr_text.find("prog: error: out of memory: an allocation failed") == 0);

  const Outcome other = run([]() -> int { throw std::runtime_error("cudaMalloc failed"); });
  CHECK(other.status == 1);
  CHECK(other.stderr_text.find("internal error: cudaMalloc failed") != std::string::npos);

  // Controls: conditions that hold throw nothing, and the body's own status comes back.
  const Outcome fine = run([]() -> int {
    gpt::require(true, "unused");
    gpt::invariant(true, "unused");
    return 0;
  });
  CHECK(fine.status == 0);
  CHECK(fine.stderr_text.empty());
}
