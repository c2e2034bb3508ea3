// Catch2's runner, compiled once (catch_session.cpp) for every test program of the suite.
#pragma once

namespace gpt::test {

/// Runs the test cases linked into this program with Catch2's command line (argc, argv)
/// and returns Catch2's exit status: 0 when every assertion held, else the number of
/// failed assertions capped at 255.
int run_catch_session(int argc, char** argv);

}  // namespace gpt::test
