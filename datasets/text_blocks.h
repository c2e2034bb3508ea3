// prepare's inputs as blocks of text, each to be encoded on its own: one after another, or
// several at once on several threads.
//
// A file is read `read_bytes` at a time, and a block ends at the last place of what was
// read where encoding the text before it alone gives the ids it has within the whole file
// (Tokenizer::encodable_prefix: for GPT-2's BPE, before a space or newline that follows a
// printable ASCII character, or after a newline between two characters that are not white
// space); the rest begins the next block. So the ids of a file's blocks, one after the
// other, are the ids of the file, whatever `read_bytes` is. One file is open at a time;
// a block is about `read_bytes` long, or a line when a line is longer, and a whole file
// only when it has no such place at all (one line of text without spaces).
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "common/tokenizer.h"

namespace gpt {

/// A block of one input's text.
struct TextBlock {
  size_t file = 0;     ///< which input (an index into the list given)
  size_t offset = 0;   ///< where `text` begins in its file, for the errors encode names
  std::string text;
  bool first = false;  ///< the file's first block
  bool last = false;   ///< the file's last block (its text may be empty)
};

/// The blocks of a list of files, in order. Each file is opened when its turn comes;
/// one that is missing, empty, no regular file or unreadable is a UserError naming it.
class TextBlocks {
 public:
  TextBlocks(const std::vector<std::string>& files, const Tokenizer& tokenizer, size_t read_bytes);
  ~TextBlocks();
  TextBlocks(const TextBlocks&) = delete;
  TextBlocks& operator=(const TextBlocks&) = delete;

  /// Fills `block` with the next block and returns true; false after the last file's last.
  bool next(TextBlock& block);

 private:
  void open(const std::string& path);

  const std::vector<std::string>& files_;
  const Tokenizer& tokenizer_;
  size_t read_bytes_;
  size_t index_ = 0;           // the file being read, or the next to open
  std::FILE* file_ = nullptr;  // open while a file is being read
  size_t file_bytes_ = 0;      // its size when it was opened
  std::string pending_;        // text read but in no block yet
  size_t pending_offset_ = 0;  // where pending_ begins in the file
  size_t searched_ = 0;        // pending_[0, searched_) has no place to end a block
  bool first_ = true;          // the next block is the file's first
};

}  // namespace gpt
