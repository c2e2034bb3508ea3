// The main of the CPU test programs: Catch2's runner.
#include "tests/catch_session.h"

int main(int argc, char** argv) { return gpt::test::run_catch_session(argc, argv); }
