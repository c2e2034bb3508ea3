// Error handling for multi-rank stages. An error on one rank must not leave the others
// blocked in a collective forever: the failing rank prints its message (naming itself)
// and aborts the whole job; with one rank the error just propagates to run_main, which
// turns it into exit status 2 (bad input) or 1 (bug).
#pragma once
#include <cstdio>
#include <exception>

#include "common/comm.h"
#include "common/error.h"

namespace gpt {

template <class F>
int run_ranks(const char* program, Communicator& world, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (world.size() == 1) throw;
    const bool user = dynamic_cast<const UserError*>(&e) != nullptr;
    std::fprintf(stderr, "%s: rank %d: %s: %s\n", program, world.rank(), user ? "error" : "internal error", e.what());
    std::fflush(stderr);
    world.abort(user ? 2 : 1);
    return user ? 2 : 1;
  }
}

}  // namespace gpt
