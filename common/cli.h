/// @file
/// What every program of the project does with its command line before anything else:
/// `--help` (or `-h`) wins wherever it stands, even beside an argument that would be
/// refused, so a user can always ask for the usage. After a lone "--" every argument is
/// a name (prepare's file list), so a file called "-h" is not a request for help.
#pragma once
#include <string_view>

namespace gpt {

/// Whether argv[1..argc) asks for the usage: "--help" or "-h" before any lone "--".
inline bool asks_for_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") return false;
    if (arg == "--help" || arg == "-h") return true;
  }
  return false;
}

}  // namespace gpt
