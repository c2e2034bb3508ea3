/// @file
/// Output files of a run (metrics, traces): the directories they go in are created on
/// demand, and a failure names the config key that chose the path.
#pragma once
#include <filesystem>
#include <string>
#include <system_error>

#include "common/error.h"

namespace gpt {

/// Creates the directories above file `path` (the config key `key` named it), or throws
/// a UserError naming the key, the directory and the system's reason.
inline void create_parent_directories(const std::string& path, const std::string& key) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (!ec) return;
  std::string message = key;  // built by appending: GCC 12 warns (-Wrestrict) falsely on one long sum
  message += ": cannot create directory '" + parent.string() + "'";
  message += " for '" + path + "': " + ec.message();
  fail(message);
}

}  // namespace gpt
