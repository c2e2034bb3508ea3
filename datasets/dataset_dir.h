// A prepared dataset's directory: the names prepare gives its shards, the set a split is
// written as, the shards a directory holds already, and what a killed prepare left there.
//
// A split of n tokens is one shard, DIR/SPLIT.bin, when n <= N (--shard-tokens), else
// ceil(n / N) shards DIR/SPLIT_00000.bin, DIR/SPLIT_00001.bin, ... of N tokens each (the
// last holds the rest), numbered with as many digits as the last needs, five at least,
// so that name order, the order the loader reads them in, is stream order.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/data.h"

namespace gpt {

/// Whether `name` is one prepare gives a shard of `split` ("train", "val"): SPLIT.bin or
/// SPLIT_<digits>.bin.
bool is_shard_name(const std::string& name, const std::string& split);

/// The shards of a dataset already in `dir` (a link or anything else under such a name
/// too), in name order; none when `dir` does not exist. A UserError when it cannot be listed.
std::vector<std::string> existing_shards(const std::string& dir);

/// `tokens` (not copied) as the shards of `split` in `dir`, at most `shard_tokens` each.
std::vector<ShardToWrite> split_into_shards(const std::string& dir, const std::string& split,
                                            std::span<const uint16_t> tokens, int64_t shard_tokens);

/// Prints a split's line (`label`: "train:"): its tokens, its shard or shards, and for
/// several the pattern to train on (SPLIT_data=DIR/SPLIT_*.bin).
void print_split(const char* label, const std::vector<ShardToWrite>& shards, const std::string& dir,
                 const std::string& split);

/// Warns of files in `dir` that the printed pattern of `split` matches but that are no
/// shard of the set just written: a run given the pattern would read them too.
void warn_of_glob_strays(const std::string& dir, const std::vector<ShardToWrite>& shards, const std::string& split);

/// Removes everything a prepare that was killed left in `dir`: its token spool and its
/// shards' temporary files (create_temporary_beside's names), once their process is gone
/// (remove_crashed_temporaries says when that is sure).
void remove_killed_runs_leftovers(const std::string& dir);

}  // namespace gpt
