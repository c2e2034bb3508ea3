// The eval file's writer (common/choices_file.h): what it writes, the reader gives back
// field for field; what the format cannot hold it refuses, naming the example, and
// leaves no file. The format itself is checked against llm.c's documentation by the
// eval_choices and prepare_choices tests' independent readers and writers.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/choices_file.h"
#include "common/error.h"
#include "common/files.h"
#include "tests/temp_dir.h"

using namespace gpt;

namespace {

ChoiceExample example(int index, int label, std::vector<int> context, std::vector<std::vector<int>> completions) {
  ChoiceExample ex;
  ex.index = index, ex.label = label, ex.context = std::move(context), ex.completions = std::move(completions);
  return ex;
}

bool same(const std::vector<ChoiceExample>& a, const std::vector<ChoiceExample>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].index != b[i].index || a[i].label != b[i].label || a[i].context != b[i].context ||
        a[i].completions != b[i].completions)
      return false;
  return true;
}

// A UserError whose message holds `needle`, and no file at `path` afterwards.
void refused(const std::string& path, const std::vector<ChoiceExample>& examples, const std::string& needle) {
  INFO("expected a refusal naming: " << needle);
  try {
    write_choices_file(path, examples);
    FAIL("written");
  } catch (const UserError& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains(needle));
  }
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(std::filesystem::is_empty(std::filesystem::path(path).parent_path()));  // no temporary file either
}

}  // namespace

TEST_CASE("choices file: the writer's examples read back field for field", "[choices]") {
  const test::TempDir dir("choices_file");
  const std::string path = (dir.path() / "e.bin").string();
  std::vector<ChoiceExample> examples = {
      example(0, 1, {5, 6, 7}, {{1}, {2, 3}}),
      example(1, 0, {65534}, {{0, 65534}, {9}, {4, 4, 4}}),  // the extreme tokens (65535 marks an example)
      example(65535, 4, {1, 2}, {{1}, {2}, {3}, {4}, {5}}),   // and as an index
  };
  write_choices_file(path, examples);
  CHECK(same(read_choices_file(path, 65536), examples));
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), {}) == 1);  // e.bin alone: no temporary
  // Control: the reader sees a changed field.
  examples[1].completions[2].back() = 5;
  CHECK_FALSE(same(read_choices_file(path, 65536), examples));
}

// A writer that used a fixed temporary name (e.bin.tmp) would truncate a user's file of
// that name, or write through a symlink there into another file and then rename the
// symlink into e.bin's place.
TEST_CASE("choices file: files under temporary-looking names are left alone", "[choices]") {
  const test::TempDir dir("choices_file_tmp_names");
  const std::string path = (dir.path() / "e.bin").string();
  const std::string notes = (dir.path() / "notes.txt").string();
  std::ofstream(path + ".tmp") << "my notes";
  std::ofstream(notes) << "precious";
  // The first name this process would pick for its temporary file, a symlink to notes:
  // taken already, so the writer moves on to the next (O_EXCL), never writing through it.
  std::filesystem::create_symlink(notes, path + ".tmp." + host_name() + "." + std::to_string(::getpid()) + ".0");
  const std::vector<ChoiceExample> examples = {example(0, 1, {5, 6, 7}, {{1}, {2, 3}})};
  write_choices_file(path, examples);
  CHECK(same(read_choices_file(path, 65536), examples));
  CHECK_FALSE(std::filesystem::is_symlink(path));
  const auto text = [](const std::string& file) {
    std::ifstream in(file);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  CHECK(text(path + ".tmp") == "my notes");
  CHECK(text(notes) == "precious");
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), {}) == 4);  // theirs, and e.bin
}

// A writer killed mid-write (SIGKILL, a power cut) leaves its temporary file, perhaps of
// gigabytes: the next write of the same file removes it, and only what is surely such a
// leftover: this machine's name, a process that no longer exists, a regular file nothing
// has written to for a minute.
TEST_CASE("choices file: a crashed writer's temporary file is removed by the next write", "[choices]") {
  const test::TempDir dir("choices_file_leftovers");
  const std::string path = (dir.path() / "e.bin").string();
  const std::string notes = (dir.path() / "notes.txt").string();
  std::ofstream(notes) << "precious";
  const pid_t child = ::fork();  // a process that has ended: its pid names no process now
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  const std::string here = path + ".tmp." + host_name() + ".";
  const std::string crashed = here + std::to_string(child) + ".0";
  const std::string crashed_link = here + std::to_string(child) + ".1";  // a symlink: not ours
  const std::string live = here + std::to_string(::getpid()) + ".7";     // a writer still running
  const std::string elsewhere = path + ".tmp." + host_name() + "-elsewhere." + std::to_string(child) + ".0";
  // Another machine whose name is this one's and a domain: HOST.lab.PID.N, not HOST.PID.N.
  const std::string dotted = path + ".tmp." + host_name() + ".lab." + std::to_string(child) + ".0";
  const std::string odd = here + std::to_string(child) + ".x";
  const std::string recent = here + std::to_string(child) + ".2";  // written to a moment ago
  for (const std::string& f : {crashed, live, elsewhere, dotted, odd, recent}) std::ofstream(f) << "half a file";
  const auto an_hour_ago = std::filesystem::file_time_type::clock::now() - std::chrono::hours(1);
  for (const std::string& f : {crashed, live, elsewhere, dotted, odd})
    std::filesystem::last_write_time(f, an_hour_ago);
  std::filesystem::create_symlink(notes, crashed_link);
  write_choices_file(path, {example(0, 1, {5, 6, 7}, {{1}, {2, 3}})});
  CHECK_FALSE(std::filesystem::exists(crashed));
  for (const std::string& f : {crashed_link, live, elsewhere, dotted, odd, recent}) CHECK(std::filesystem::exists(f));
}

// A file whose own name fits NAME_MAX (255 bytes) but not with ".tmp.HOST.PID.N" after it
// (here one byte too many with this machine's whole name): its temporary cuts the host's
// name short, and a crashed writer's leftover of that form is still found and removed.
TEST_CASE("choices file: a name near NAME_MAX is written, its temporary within the limit", "[choices]") {
  const test::TempDir dir("choices_file_long_name");
  const std::string pid = std::to_string(::getpid());
  const size_t whole = 5 + host_name().size() + 1 + pid.size() + 2;  // ".tmp." HOST "." PID ".0"
  const std::string name = std::string(255 - whole + 1 - 4, 'e') + ".bin";
  REQUIRE(name.size() + whole == 256);
  const std::string path = (dir.path() / name).string();
  REQUIRE(temporary_host(path).size() < host_name().size());
  const pid_t child = ::fork();  // a process that has ended: its pid names no process now
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  const std::string crashed = path + ".tmp." + temporary_host(path) + "." + std::to_string(child) + ".0";
  std::ofstream(crashed) << "half a file";
  REQUIRE(std::filesystem::exists(crashed));
  std::filesystem::last_write_time(crashed, std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  const std::vector<ChoiceExample> examples = {example(0, 1, {5, 6, 7}, {{1}, {2, 3}})};
  write_choices_file(path, examples);
  CHECK(same(read_choices_file(path, 65536), examples));
  CHECK_FALSE(std::filesystem::exists(crashed));
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), {}) == 1);
}

TEST_CASE("choices file: what the format cannot hold is refused by example, and no file is left", "[choices]") {
  const test::TempDir dir("choices_file_bad");
  const std::string path = (dir.path() / "e.bin").string();
  const ChoiceExample good = example(0, 0, {1}, {{2}, {3}});
  refused(path, {}, "0 examples");
  refused(path, std::vector<ChoiceExample>(65536, good), "65536 examples");
  refused(path, {good, example(1, 0, {1}, {{2}})}, "example 1: 1 completions");
  refused(path, {example(0, 2, {1}, {{2}, {3}})}, "example 0: label 2 is not one of its 2 completions");
  refused(path, {example(0, 0, {}, {{2}, {3}})}, "example 0: no context tokens");
  refused(path, {example(0, 0, {1}, {{2}, {}})}, "example 0: completion 1 is empty");
  refused(path, {example(0, 0, {1, 65536}, {{2}, {3}})}, "the context token 1 is 65536, outside the format's 16 bits");
  refused(path, {example(0, 0, {1}, {{2}, {65535}})}, "completion 1 token 0 is 65535, the start-of-example marker");
  refused(path, {example(70000, 0, {1}, {{2}, {3}})}, "its index is 70000");
  refused(path, {example(0, 0, std::vector<int>(40000, 1), {{2}, {3}})}, "bytes, more than the 65,535");
}
