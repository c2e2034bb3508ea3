// Catch2's implementation, compiled once for every test program of the suite; the two
// mains (catch_main.cpp for the CPU tests, gpu/gpu_main.cpp for the GPU tests) only call
// it, and each test's own file includes catch.hpp for its macros alone.
#define CATCH_CONFIG_RUNNER
#include "tests/catch_session.h"

#include <catch2/catch.hpp>

namespace gpt::test {

int run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }

}  // namespace gpt::test
