/// @file
/// ```
/// Errors, and the exit status each gives.
///   bad input (a config key, a data file, a checkpoint, a command-line argument): the
///     user can fix it. require(condition, message) / fail(message) throw a UserError;
///     the binary prints "error: <message>" and exits with status 2.
///   a violated internal invariant (a caller inside this program broke a contract: a
///     call in the wrong order, buffers of mismatched sizes, an impossible state): a bug
///     to report. invariant(condition, message) / internal_error(message) throw an
///     InternalError; the binary prints "internal error: <message>" and exits with status 1,
///     as it does for any other exception.
/// ```
/// The message names the file, key or value and the reason.
#pragma once
#include <atomic>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>

namespace gpt {

/// Bad input the user can fix: run_main prints "error: <message>" and returns 2.
struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A UserError that every rank of a group of `ranks` throws together, after a collective
/// has told each of them that one failed (checkpoint_agree.cpp): where the group is the
/// whole job, no rank is left waiting in a collective, so the job can end without an abort.
struct AgreedError : UserError {
  /// `message` as every rank of the group of `group_size` ranks throws it.
  AgreedError(const std::string& message, int group_size) : UserError(message), ranks(group_size) {}
  int ranks;  ///< the group that agreed
};

/// Throws a UserError carrying `message` (name the file, key or value and the reason).
[[noreturn]] inline void fail(const std::string& message) { throw UserError(message); }

/// Throws a UserError carrying `message` unless `condition` holds.
inline void require(bool condition, const std::string& message) {
  if (!condition) fail(message);
}

/// A contract broken inside this program, a bug to report: run_main prints "internal
/// error: <message>" and returns 1.
struct InternalError : std::logic_error {
  using std::logic_error::logic_error;
};

/// Throws an InternalError: this program broke one of its own contracts.
[[noreturn]] inline void internal_error(const std::string& message) { throw InternalError(message); }

/// Throws an InternalError carrying `message` unless `condition` holds.
inline void invariant(bool condition, const std::string& message) {
  if (!condition) internal_error(message);
}

namespace detail {
/// The program's name as run_main was given it ("" before): read it through program_name().
inline std::atomic<const char*> program_name{""};
}  // namespace detail

/// The name the program's run_main was given ("train", "prepare"; "" before it): for a
/// message printed outside run_main's own, a watchdog thread's, to begin as run_main's do.
inline const char* program_name() { return detail::program_name.load(); }

/// Runs `body` and turns exceptions into exit codes: 2 for bad input (and for too little
/// memory, which is no bug either), 1 for bugs.
template <class F>
int run_main(const char* program, F&& body) {
  detail::program_name = program;  // a string literal: it outlives every reader
  try {
    return body();
  } catch (const UserError& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 2;
  } catch (const std::bad_array_new_length& e) {  // a size computed wrong: a bug, not a lack of memory
    std::fprintf(stderr, "%s: internal error: %s\n", program, e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    // No bug, and nothing the program can mend: the machine (or a ulimit) has too little.
    std::fprintf(stderr, "%s: error: out of memory: an allocation failed (a limit set by ulimit -v counts too)\n",
                 program);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace gpt
