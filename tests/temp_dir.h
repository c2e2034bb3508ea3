// A fresh directory under the system's temporary directory, removed with everything in it
// when the TempDir goes (at the end of a test, also when it fails): the tests' files never
// outlive them.
#pragma once
#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

#include <unistd.h>

namespace test {

class TempDir {
 public:
  /// /tmp/<prefix>_<pid>_<n>: unique to this process and this TempDir.
  explicit TempDir(const std::string& prefix) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }  ///< the directory
  std::string str() const { return path_.string(); }           ///< the directory, as a string
  std::string file(const std::string& name) const { return (path_ / name).string(); }  ///< a path in it

 private:
  std::filesystem::path path_;
};

}  // namespace test
