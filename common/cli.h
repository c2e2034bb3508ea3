/// @file
/// What the trainers and the tools (build/bin's prepare, tokenize, sample, eval_choices,
/// prepare_choices, checkpoint_diff, llmc_model, memory_plan, pipeline_schedule) do with
/// their command line before anything else: `--help` (or `-h`) wins wherever it stands,
/// even beside an argument that would be refused, so a user can always ask for the usage.
/// A flag's value spelled `-h` or `--help` counts as the request too: a file of that name
/// is given as `./-h`. (The benchmarks and test helpers take positional numbers only.)
#pragma once
#include <string_view>

namespace gpt {

/// Whether argv[1..argc) asks for the usage: a "--help" or "-h" anywhere, or, for a program
/// whose lone "--" ends its options (prepare: every argument after it is a file name),
/// before that "--".
inline bool asks_for_help(int argc, char** argv, bool dashdash_ends_options = false) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (dashdash_ends_options && arg == "--") return false;
    if (arg == "--help" || arg == "-h") return true;
  }
  return false;
}

}  // namespace gpt
