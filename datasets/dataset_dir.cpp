// A prepared dataset's directory (dataset_dir.h).
#include "datasets/dataset_dir.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <system_error>

#include "common/error.h"
#include "common/files.h"

namespace gpt {

bool is_shard_name(const std::string& name, const std::string& split) {
  if (name == split + ".bin") return true;
  const std::string head = split + "_", tail = ".bin";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return false;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::vector<std::string> existing_shards(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (is_shard_name(name, "train") || is_shard_name(name, "val")) found.push_back(dir + "/" + name);
  }
  if (ec) fail("--out '" + dir + "': cannot list it (" + ec.message() + ")");
  std::sort(found.begin(), found.end());
  return found;
}

std::vector<ShardToWrite> split_into_shards(const std::string& dir, const std::string& split,
                                            std::span<const uint16_t> tokens, int64_t shard_tokens) {
  const size_t per_shard = size_t(shard_tokens);
  const size_t count = (tokens.size() + per_shard - 1) / per_shard;
  if (count == 1) return {{dir + "/" + split + ".bin", tokens}};
  const int digits = std::max<int>(5, int(std::to_string(count - 1).size()));
  std::vector<ShardToWrite> shards;
  for (size_t k = 0; k < count; ++k) {
    std::string number = std::to_string(k);
    number.insert(0, size_t(digits) - number.size(), '0');
    const size_t first = k * per_shard;
    shards.push_back({dir + "/" + split + "_" + number + ".bin",
                      tokens.subspan(first, std::min(per_shard, tokens.size() - first))});
  }
  return shards;
}

void print_split(const char* label, const std::vector<ShardToWrite>& shards, const std::string& dir,
                 const std::string& split) {
  size_t tokens = 0;
  for (const ShardToWrite& s : shards) tokens += s.tokens.size();
  if (shards.size() == 1) {
    std::printf("%-6s %12zu tokens -> %s\n", label, tokens, shards[0].path.c_str());
  } else {
    std::printf("%-6s %12zu tokens -> %zu shards, %s .. %s (%s_data=%s/%s_*.bin)\n", label, tokens, shards.size(),
                shards.front().path.c_str(), shards.back().path.c_str(), split.c_str(), dir.c_str(),
                split.c_str());
  }
}

void remove_killed_runs_leftovers(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> targets = {dir + "/tokens"};
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t tmp = name.find(".tmp.");
    if (tmp != std::string::npos &&
        (is_shard_name(name.substr(0, tmp), "train") || is_shard_name(name.substr(0, tmp), "val")))
      targets.push_back(dir + "/" + name.substr(0, tmp));
  }
  remove_crashed_temporaries(targets);
}

void warn_of_glob_strays(const std::string& dir, const std::vector<ShardToWrite>& shards,
                         const std::string& split) {
  namespace fs = std::filesystem;
  if (shards.size() < 2) return;  // one shard is named, not globbed
  std::set<std::string> ours;
  for (const ShardToWrite& s : shards) ours.insert(fs::path(s.path).filename().string());
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with(split + "_") && name.ends_with(".bin") && !ours.count(name))
      std::printf("warning: %s/%s matches %s_*.bin but is no shard of this dataset: move it, or a run given "
                  "%s_data=%s/%s_*.bin reads it too\n", dir.c_str(), name.c_str(), split.c_str(), split.c_str(),
                  dir.c_str(), split.c_str());
  }
}

}  // namespace gpt
