// prepare's inputs as blocks of text (text_blocks.h).
#include "datasets/text_blocks.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "common/error.h"

namespace gpt {

TextBlocks::TextBlocks(const std::vector<std::string>& files, const Tokenizer& tokenizer, size_t read_bytes)
    : files_(files), tokenizer_(tokenizer), read_bytes_(std::max<size_t>(read_bytes, 1)) {}

TextBlocks::~TextBlocks() {
  if (file_) std::fclose(file_);
}

void TextBlocks::open(const std::string& path) {
  // (prepare checked each input before it read any: these say what changed since, a file
  // removed or emptied while the others were encoded.)
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("input '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("input '" + path + "': not a regular file");
  if (st.st_size == 0) fail("input '" + path + "' is empty");
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) fail("input '" + path + "': cannot open for reading (" + std::strerror(errno) + ")");
  file_bytes_ = size_t(st.st_size);
  pending_.clear();
  pending_offset_ = 0;
  searched_ = 0;
  first_ = true;
}

bool TextBlocks::next(TextBlock& block) {
  for (;;) {
    if (!file_) {
      if (index_ == files_.size()) return false;
      open(files_[index_]);
    }
    // A read asks for no more than the file holds, and a byte to see its end: a corpus
    // of millions of small files must not make and clear a whole block for each.
    const size_t old_size = pending_.size(), read_so_far = pending_offset_ + old_size;
    const size_t want = std::min(read_bytes_, file_bytes_ > read_so_far ? file_bytes_ - read_so_far + 1 : 1);
    pending_.resize(old_size + want);
    const size_t got = std::fread(pending_.data() + old_size, 1, want, file_);
    pending_.resize(old_size + got);
    const bool at_end = got < want;
    if (at_end && std::ferror(file_))
      fail("input '" + files_[index_] + "': read error at byte " + std::to_string(read_so_far + got));
    // A place to end a block needs the characters either side of it (is_piece_boundary:
    // up to 5 bytes before it, 4 after), so the search resumes 8 bytes early: a place
    // at the seam of two reads is found once both sides are read.
    const size_t from = searched_ > 8 ? searched_ - 8 : 0;
    const size_t end =
        at_end ? pending_.size() : from + tokenizer_.encodable_prefix(std::string_view(pending_).substr(from));
    if (!at_end && end == from) {  // no place yet (a line longer than a read): read on
      searched_ = pending_.size();
      continue;
    }
    block.file = index_;
    block.offset = pending_offset_;
    block.text.assign(pending_, 0, end);
    block.first = first_;
    block.last = at_end;
    pending_.erase(0, end);
    pending_offset_ += end;
    searched_ = 0;
    first_ = false;
    if (at_end) {
      std::fclose(file_);
      file_ = nullptr;
      ++index_;
    }
    return true;
  }
}

}  // namespace gpt
