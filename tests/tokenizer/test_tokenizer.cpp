// The tokenizer's pieces on their own: llm.c's file format (and every malformed file
// refused by name), the byte tokenizer, the BPE rule on vocabularies small enough to
// follow by hand, UTF-8 decoding and the Unicode classes. The comparison with the
// independent reference on large texts is vs_reference.sh.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/error.h"
#include "common/pretokenize.h"
#include "common/tokenizer.h"
#include "common/unicode.h"
#include "datasets/text_blocks.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using Catch::Contains;
using gpt::Tokenizer;

namespace {

std::string temp_file(const std::string& name) {
  static int counter = 0;
  static const test::TempDir dir("gpt_test_tokenizer");  // removed when the tests end
  return dir.file(std::to_string(counter++) + "_" + name);
}

// A tokenizer file as llm.c writes it; the fields are arguments so that the tests can
// write files llm.c never would.
struct FileSpec {
  uint32_t magic = 20240328, version = 2;
  int64_t vocab = -1;  // -1: the number of tokens
  int64_t eot = -1;    // -1: the last id
  std::vector<std::string> tokens;
  std::string trailing;  // bytes after the table
};

std::string write_tokenizer(const FileSpec& spec) {
  const std::string path = temp_file("tok.bin");
  std::vector<uint32_t> header(256, 0);
  header[0] = spec.magic;
  header[1] = spec.version;
  header[2] = uint32_t(spec.vocab >= 0 ? spec.vocab : int64_t(spec.tokens.size()));
  header[3] = uint32_t(spec.eot >= 0 ? spec.eot : int64_t(spec.tokens.size()) - 1);
  std::ofstream out(path, std::ios::binary);
  for (const uint32_t word : header)
    for (int b = 0; b < 4; ++b) out.put(char((word >> (8 * b)) & 0xFF));
  for (const std::string& t : spec.tokens) {
    out.put(char(t.size()));
    out << t;
  }
  out << spec.trailing;
  return path;
}

// The 256 single bytes in id order, then `extra` (ids 256, 257, ...), then end-of-text.
std::vector<std::string> bytes_then(std::vector<std::string> extra) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
  tokens.insert(tokens.end(), extra.begin(), extra.end());
  tokens.emplace_back("<|endoftext|>");
  return tokens;
}

}  // namespace

TEST_CASE("the byte tokenizer: a token per byte, every byte string round-trips") {
  const Tokenizer t = Tokenizer::named("bytes");
  CHECK(t.vocab_size() == 256);
  CHECK(t.start_token() == '\n');
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  const std::vector<int> ids = t.encode(all, "test");
  REQUIRE(ids.size() == 256);
  for (int b = 0; b < 256; ++b) CHECK(ids[size_t(b)] == b);
  CHECK(t.decode(ids) == all);
  CHECK_THROWS_WITH(t.decode({256}), Contains("token id 256 is outside the vocabulary of tokenizer bytes"));
  CHECK_THROWS_WITH(t.decode({-1}), Contains("token id -1"));
}

TEST_CASE("an llm.c tokenizer file: tokens, end-of-text and decoding") {
  FileSpec spec;
  spec.tokens = bytes_then({"he", "ll", "hell", "hello"});
  const Tokenizer t = Tokenizer::load(write_tokenizer(spec));
  CHECK(t.vocab_size() == 261);
  CHECK(t.start_token() == 260);  // the header's end-of-text id
  CHECK(t.token_bytes(259) == "hello");
  CHECK(t.decode({259, 32, 257}) == "hello ll");
  CHECK(t.decode({260}) == "<|endoftext|>");  // decoded as its text
  CHECK_THROWS_WITH(t.decode({261}), Contains("token id 261 is outside the vocabulary"));

  SECTION("version 1 has no end-of-text field: the last id is end-of-text") {
    FileSpec v1 = spec;
    v1.version = 1;
    v1.eot = 7;  // ignored: version 1's header ends after vocab_size
    CHECK(Tokenizer::load(write_tokenizer(v1)).start_token() == 260);
  }
}

TEST_CASE("BPE by ranks: the lowest-rank pair first, the leftmost on a tie, a whole piece as it is") {
  // Ranks are ids: "bc" (256) merges before "ab" (257), so "abc" -> a + bc, although
  // "ab" comes first in the text.
  FileSpec spec;
  spec.tokens = bytes_then({"bc", "ab", "aa", "xyz", "<|"});
  const Tokenizer t = Tokenizer::load(write_tokenizer(spec));
  CHECK(t.encode("abc", "test") == std::vector<int>{'a', 256});
  CHECK(t.encode("ab", "test") == std::vector<int>{257});
  // Equal ranks: "aaa" has the pair "aa" twice; the leftmost merges: aa + a, not a + aa.
  CHECK(t.encode("aaa", "test") == std::vector<int>{258, 'a'});
  CHECK(t.encode("aaaa", "test") == std::vector<int>{258, 258});
  // "xyz" is a token but neither "xy" nor "yz" is: the whole piece is taken as it is,
  // while in a longer piece the bytes cannot reach it.
  CHECK(t.encode("xyz", "test") == std::vector<int>{259});
  CHECK(t.encode("xyzx", "test") == std::vector<int>{'x', 'y', 'z', 'x'});
  // Pieces are encoded apart: no token spans " ab" and "c"'s neighbours across a space.
  CHECK(t.encode("ab ab", "test") == std::vector<int>{257, ' ', 257});
  // The end-of-text token is never produced by merging: "<|" merges, and a text that
  // stops short of the marker stays other tokens.
  CHECK(t.encode("<|endoftext|", "test").front() == 260);
  CHECK(t.encode("<|endoftext|", "test").size() > 1);
  CHECK(t.decode(t.encode("ab abc aaa xyz!", "test")) == "ab abc aaa xyz!");
  // An empty text has no ids.
  CHECK(t.encode("", "test").empty());
}

TEST_CASE("the end-of-text text is cut out first and stands for its token") {
  FileSpec spec;
  spec.tokens = bytes_then({"bc", "ab", "aa", "xyz", "<|"});  // end-of-text is 261
  const Tokenizer t = Tokenizer::load(write_tokenizer(spec));
  CHECK(t.end_of_text() == 261);
  CHECK(t.encode("<|endoftext|>", "test") == std::vector<int>{261});
  CHECK(t.encode("<|endoftext|><|endoftext|>", "test") == std::vector<int>{261, 261});
  // Documents joined by it: no piece spans the marker, each side is encoded alone.
  CHECK(t.encode("ab<|endoftext|>ab", "test") == std::vector<int>{257, 261, 257});
  CHECK(t.encode(" aa<|endoftext|>\nbc", "test") == std::vector<int>{' ', 258, 261, '\n', 256});
  // decode then encode gives the ids back, the end-of-text ones included.
  const std::vector<int> ids{257, 261, ' ', 258, 261};
  CHECK(t.encode(t.decode(ids), "test") == ids);
  // Errors after a marker name the offset in the whole text.
  CHECK_THROWS_WITH(t.encode("<|endoftext|>a\xff", "prompt"),
                    Contains("prompt is not valid UTF-8: byte 0xFF at offset 14"));
  // The byte tokenizer has no end-of-text token: the text stays its 13 bytes.
  const Tokenizer bytes = Tokenizer::bytes();
  CHECK(bytes.end_of_text() == -1);
  CHECK(bytes.encode("<|endoftext|>", "test").size() == 13);
}

TEST_CASE("a prompt's ids: encoded, or the start token alone when empty") {
  FileSpec spec;
  spec.tokens = bytes_then({"ab"});
  const Tokenizer t = Tokenizer::load(write_tokenizer(spec));
  CHECK(t.encode_prompt("ab") == std::vector<int>{256});
  CHECK(t.encode_prompt("") == std::vector<int>{257});
  CHECK(Tokenizer::bytes().encode_prompt("") == std::vector<int>{'\n'});
  CHECK(Tokenizer::bytes().encode_prompt("hi") == std::vector<int>{'h', 'i'});
}

TEST_CASE("text a file tokenizer cannot encode is refused, naming what and where") {
  FileSpec spec;
  spec.tokens = {"a", "b", " ", "ab", "<|endoftext|>"};
  const Tokenizer t = Tokenizer::load(write_tokenizer(spec));
  CHECK(t.encode("ab b", "test") == std::vector<int>{3, 2, 1});
  CHECK_THROWS_WITH(t.encode("ab c", "prompt"),
                    Contains("prompt: byte 0x63 at offset 3 is no token of") && Contains("cannot be encoded"));
  // After an end-of-text marker the offset is still the byte's in the whole text.
  CHECK_THROWS_WITH(t.encode("<|endoftext|>ab c", "prompt"), Contains("prompt: byte 0x63 at offset 16"));
  CHECK_THROWS_WITH(t.encode("a\xff", "prompt"), Contains("prompt is not valid UTF-8: byte 0xFF at offset 1"));
}

TEST_CASE("a malformed tokenizer file is refused, naming the file and the fault") {
  FileSpec good;
  good.tokens = bytes_then({"ab"});
  struct Case {
    const char* name;
    FileSpec spec;
    const char* needle;
  };
  std::vector<Case> cases;
  auto with = [&](const char* name, auto change, const char* needle) {
    FileSpec s = good;
    change(s);
    cases.push_back({name, s, needle});
  };
  with("magic", [](FileSpec& s) { s.magic = 20240520; }, "magic number 20240520, not llm.c's tokenizer magic");
  with("version", [](FileSpec& s) { s.version = 3; }, "version 3 (this reader knows 1 and 2)");
  with("no tokens", [](FileSpec& s) { s.vocab = 0; }, "vocab_size 0 outside 1..65536");
  with("too many", [](FileSpec& s) { s.vocab = 70000; }, "vocab_size 70000 outside 1..65536");
  with("eot", [](FileSpec& s) { s.eot = 258; }, "end-of-text token 258 is not below vocab_size 258");
  with("cut off", [](FileSpec& s) { s.vocab = 300; }, "the token table ends after 258 of 300 tokens");
  with("empty token", [](FileSpec& s) { s.tokens[5] = ""; }, "token 5 has length 0");
  with("trailing", [](FileSpec& s) { s.trailing = "xyz"; }, "3 bytes after the last of its 258 tokens");
  for (const Case& c : cases) {
    INFO(c.name);
    const std::string path = write_tokenizer(c.spec);
    CHECK_THROWS_AS(Tokenizer::load(path), gpt::UserError);
    CHECK_THROWS_WITH(Tokenizer::load(path), Contains(path) && Contains(c.needle));
  }
  // A token whose length runs past the end of the file.
  const std::string path = write_tokenizer(good);
  fs::resize_file(path, fs::file_size(path) - 3);
  CHECK_THROWS_WITH(Tokenizer::load(path), Contains("token 257 (13 bytes at offset") && Contains("runs past the end"));
  fs::resize_file(path, 100);
  CHECK_THROWS_WITH(Tokenizer::load(path), Contains("100 bytes, shorter than the 1024-byte header"));
  CHECK_THROWS_WITH(Tokenizer::load(path + ".missing"), Contains(path + ".missing': no such file"));
  CHECK_THROWS_WITH(Tokenizer::named(fs::path(path).parent_path().string()), Contains("not a regular file"));
  // The control: the unchanged file loads.
  CHECK(Tokenizer::load(write_tokenizer(good)).vocab_size() == 258);
}

TEST_CASE("UTF-8: code points with their offsets; malformed text refused at its first bad byte") {
  const std::vector<gpt::CodePoint> cps = gpt::decode_utf8("a\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80", "text");
  REQUIRE(cps.size() == 4);
  CHECK(cps[0].value == U'a');
  CHECK((cps[1].value == U'\u00e9' && cps[1].offset == 1 && cps[1].bytes == 2));
  CHECK((cps[2].value == U'\u65e5' && cps[2].offset == 3 && cps[2].bytes == 3));
  CHECK((cps[3].value == U'\U0001F600' && cps[3].offset == 6 && cps[3].bytes == 4));
  CHECK_THROWS_WITH(gpt::decode_utf8("ab\x80", "t"), Contains("byte 0x80 at offset 2 cannot start a character"));
  CHECK_THROWS_WITH(gpt::decode_utf8("a\xe6\x97", "t"), Contains("byte 0xE6 at offset 1 starts a character the text cuts off"));
  CHECK_THROWS_WITH(gpt::decode_utf8("\xe6x\xa5", "t"), Contains("byte 0x78 at offset 1 should continue a character"));
  CHECK_THROWS_WITH(gpt::decode_utf8("\xc0\xaf", "t"), Contains("overlong form"));
  CHECK_THROWS_WITH(gpt::decode_utf8("\xed\xa0\x80", "t"), Contains("surrogate"));
  CHECK_THROWS_WITH(gpt::decode_utf8("\xf4\x90\x80\x80", "t"), Contains("above U+10FFFF"));
}

TEST_CASE("the Unicode classes of the pre-tokenizer") {
  for (const char32_t c : {U'A', U'z', U'\u00e9', U'\u03a9', U'\u0416', U'\u05e9', U'\u65e5', U'\uac00', U'\u02b0'})
    CHECK(gpt::is_letter(c));
  for (const char32_t c : {U'0', U'9', U'\u00b2', U'\u00bd', U'\u0663', U'\u216b', U'\U0001D7CE'})
    CHECK(gpt::is_number(c));
  // Neither: combining marks, punctuation, symbols, emoji, controls.
  for (const char32_t c : {U'\u0301', U'-', U'\u2014', U'\u20ac', U'\U0001F600', U'\x1c', U'_'}) {
    CHECK_FALSE(gpt::is_letter(c));
    CHECK_FALSE(gpt::is_number(c));
  }
  for (const char32_t c : {U'\t', U'\n', U'\r', U' ', U'\u0085', U'\u00a0', U'\u2003', U'\u2028', U'\u3000'})
    CHECK(gpt::is_white_space(c));
  // Not White_Space: the information separators (Python's str.isspace says yes) and
  // the zero-width space.
  for (const char32_t c : {U'\x1c', U'\x1f', U'\u200b', U'a'}) CHECK_FALSE(gpt::is_white_space(c));
  // Past the last range, and the last code point.
  CHECK_FALSE(gpt::is_letter(U'\U0010FFFF'));
  CHECK_FALSE(gpt::is_number(U'\U0010FFFF'));
}

TEST_CASE("pre-tokenizing part by part gives the pieces of the whole text") {
  // Random texts of every class the pattern tells apart, cut into parts of 1, 7 and 64
  // bytes at least: the parts' pieces, one after the other, are the whole text's.
  const std::vector<std::string> pool = {"a", "Z", "\u00e9", "\u65e5", "\u05e9", "7", "\u00b2", "\u216b", ".", "!",
                                         "'", "'s", "'ll", "\u2014", "\U0001F600", " ", " ", " ", "\n", "\n",
                                         "\t", "\r", "\u00a0", "\u3000", "\u2028", "\x0b", "\u0301"};
  std::mt19937 rng(42);
  auto pieces_of = [](const std::vector<std::string_view>& parts) {
    std::vector<std::string> out;
    for (const std::string_view part : parts)
      for (const std::string_view piece : gpt::gpt2_pretokenize(part, "test")) out.emplace_back(piece);
    return out;
  };
  for (int trial = 0; trial < 20; ++trial) {
    std::string text;
    while (text.size() < 3000) text += pool[rng() % pool.size()];
    const std::vector<std::string> whole = pieces_of({text});
    for (const size_t part_bytes : {size_t(1), size_t(7), size_t(64)}) {
      INFO("trial " << trial << ", parts of " << part_bytes << " bytes at least");
      const std::vector<std::string_view> parts = gpt::pretokenize_parts(text, part_bytes);
      REQUIRE(parts.size() > 1);
      std::string joined;
      for (size_t i = 0; i < parts.size(); ++i) {
        joined += parts[i];
        if (i + 1 < parts.size()) CHECK(parts[i].size() >= part_bytes);
      }
      CHECK(joined == text);
      CHECK(pieces_of(parts) == whole);
    }
  }
  // A text shorter than a part, or with no place to cut, is one part.
  CHECK(gpt::pretokenize_parts("ab cd", 64).size() == 1);
  CHECK(gpt::pretokenize_parts("\u65e5\u65e5 \u65e5\u65e5", 1).size() == 1);
  // Negative control: cut anywhere else (here inside a word) the pieces differ.
  CHECK(pieces_of({std::string_view("ab cd").substr(0, 1), std::string_view("ab cd").substr(1)}) !=
        pieces_of({"ab cd"}));
}

TEST_CASE("encoding block by block up to encodable_prefix gives the ids of the whole text") {
  // prepare reads a file a block at a time and encodes each up to encodable_prefix,
  // carrying the rest into the next block. Random texts of every class, with merges that
  // cross spaces' neighbours and end-of-text markers, read in blocks of 1, 5 and 64
  // bytes: the ids are those of the whole text.
  FileSpec spec;
  spec.tokens = bytes_then({" a", "aa", "a ", "  ", "\n\n", "<|", "'s"});
  const Tokenizer t = Tokenizer::load(write_tokenizer(spec));
  const std::vector<std::string> pool = {"a", "a", "Z", "\u00e9", "\u65e5", "7", "\u216b", ".", "'", "'s", " ",
                                         " ", "\n", "\n", "\t", "\u00a0", "\u3000", "\u0301", "<|endoftext|>"};
  std::mt19937 rng(7);
  // The ids of `text` read `block` bytes at a time, as prepare reads a file; with
  // `anywhere`, each block is encoded whole, cut at its last whole character (the
  // negative control).
  const auto blockwise = [&](const Tokenizer& tok, const std::string& text, size_t block, bool anywhere = false) {
    std::vector<int> ids;
    size_t begin = 0;  // where the text not yet encoded starts
    for (size_t read = 0; read < text.size();) {
      read = std::min(text.size(), read + block);
      const std::string_view pending = std::string_view(text).substr(begin, read - begin);
      size_t cut = read == text.size() || anywhere ? pending.size() : tok.encodable_prefix(pending);
      if (anywhere)  // at a whole character still, for the control fails on the ids, not on UTF-8
        while (begin + cut < text.size() && (static_cast<unsigned char>(text[begin + cut]) & 0xC0) == 0x80) --cut;
      CHECK(cut <= pending.size());
      const std::vector<int> part = tok.encode(pending.substr(0, cut), "test", begin);
      ids.insert(ids.end(), part.begin(), part.end());
      begin += cut;
    }
    return ids;
  };
  int rejected = 0;  // texts on which the control's ids differ
  for (int trial = 0; trial < 20; ++trial) {
    std::string text;
    while (text.size() < 2000) text += pool[rng() % pool.size()];
    const std::vector<int> whole = t.encode(text, "test");
    for (const size_t block : {size_t(1), size_t(5), size_t(64)}) {
      INFO("trial " << trial << ", blocks of " << block << " bytes");
      CHECK(blockwise(t, text, block) == whole);
      CHECK(blockwise(Tokenizer::bytes(), text, block) == Tokenizer::bytes().encode(text, "test"));
    }
    rejected += blockwise(t, text, 64, /*anywhere=*/true) != whole;
  }
  // Negative control: blocks cut anywhere give other ids (a merge or a marker split).
  CHECK(rejected == 20);
  // Bytes may be cut anywhere; a file at the last place before a space or newline that
  // follows a printable ASCII character, or after a newline between two characters that
  // are not white space; none at all is 0.
  CHECK(Tokenizer::bytes().encodable_prefix("ab\xff" "c") == 4);
  CHECK(t.encodable_prefix("aa aa\nb") == 6);
  CHECK(t.encodable_prefix("aa aa\n b") == 5);
  CHECK(t.encodable_prefix("aa  ") == 2);
  CHECK(t.encodable_prefix("a\n\nb") == 1);
  CHECK(t.encodable_prefix("\u65e5 aa") == 0);
  CHECK(t.encodable_prefix("\u65e5\n\u65e5\u65e5") == 4);         // Chinese lines: after the newline
  CHECK(t.encodable_prefix("\u65e5\u3000\n\u65e5") == 0);         // an ideographic space before it
  CHECK(t.encodable_prefix("\u65e5\n\u3000\u65e5") == 0);         // and after it
  CHECK(t.encodable_prefix("\u65e5\n\xe6") == 0);                  // a character cut off after it
  // An error in a block names the offset in the whole input.
  CHECK_THROWS_WITH(t.encode("a\xff", "input 'x'", 100), Contains("byte 0xFF at offset 101"));
}

TEST_CASE("prepare's text blocks: each file's blocks, encoded one by one, give the file's ids") {
  // TextBlocks reads files `read_bytes` at a time and ends each block at encodable_prefix.
  // Two random files of every class, lines of Chinese among them, read 1, 3 and 16 bytes
  // at a time: each file's blocks hold its text in order, flagged first and last, with
  // their offsets, and their ids, block after block, are the file's.
  FileSpec spec;
  spec.tokens = bytes_then({" a", "aa", "a ", "\n\u65e5", "\u65e5\n", "<|"});
  const Tokenizer t = Tokenizer::load(write_tokenizer(spec));
  const std::vector<std::string> pool = {"a", "a", " ", " ", "\n", "\n", "\u65e5", "\u65e5", "\u3002", "\u3000",
                                         "'s", "\t", "<|endoftext|>", "7", "\r\n"};
  std::mt19937 rng(11);
  std::vector<std::string> paths, texts;
  for (int f = 0; f < 2; ++f) {
    std::string text;
    while (text.size() < 3000) text += pool[rng() % pool.size()];
    paths.push_back(temp_file("blocks" + std::to_string(f) + ".txt"));
    std::ofstream(paths.back(), std::ios::binary) << text;
    texts.push_back(text);
  }
  for (const size_t read_bytes : {size_t(1), size_t(3), size_t(16)}) {
    INFO("read " << read_bytes << " bytes at a time");
    gpt::TextBlocks blocks(paths, t, read_bytes);
    std::vector<std::string> joined(paths.size());
    std::vector<std::vector<int>> ids(paths.size());
    size_t count = 0, previous_file = 0;
    bool ended = true;  // the previous block was its file's last
    for (gpt::TextBlock block; blocks.next(block); ++count) {
      REQUIRE(block.file < paths.size());
      CHECK(block.first == ended);
      CHECK(block.file == (ended && count > 0 ? previous_file + 1 : previous_file));
      CHECK(block.offset == joined[block.file].size());
      joined[block.file] += block.text;
      const std::vector<int> part = t.encode(block.text, "test", block.offset);
      ids[block.file].insert(ids[block.file].end(), part.begin(), part.end());
      ended = block.last;
      previous_file = block.file;
    }
    CHECK(ended);
    CHECK(count > 2 * 3000 / 64);  // many blocks, not a file each
    for (size_t f = 0; f < paths.size(); ++f) {
      CHECK(joined[f] == texts[f]);
      CHECK(ids[f] == t.encode(texts[f], "test"));
    }
  }
  // Negative control: the same files cut every 16 bytes (at whole characters) and
  // encoded piece by piece give other ids, so the comparison above can fail.
  const std::string& text = texts[0];
  std::vector<int> cut_anywhere;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = std::min(text.size(), begin + 16);
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    const std::vector<int> part = t.encode(std::string_view(text).substr(begin, end - begin), "test");
    cut_anywhere.insert(cut_anywhere.end(), part.begin(), part.end());
    begin = end;
  }
  CHECK(cut_anywhere != t.encode(text, "test"));
}

TEST_CASE("GPT-2's pre-tokenizer: the pieces cover the text in order") {
  const std::string text = "Hello world's  end\n\n  x 2024 \u00b2\u216bAbc... don't\t\tz ";
  const std::vector<std::string_view> pieces = gpt::gpt2_pretokenize(text, "test");
  std::string joined;
  for (const std::string_view p : pieces) joined += p;
  CHECK(joined == text);
  // What the pattern's alternatives give, read off the pattern (pretokenize.h).
  const std::vector<std::string> expected = {"Hello", " world", "'s", " ", " end", "\n\n ", " x", " 2024",
                                             " \u00b2\u216b", "Abc", "...", " don", "'t", "\t", "\t", "z", " "};
  CHECK(std::vector<std::string>(pieces.begin(), pieces.end()) == expected);
  CHECK_THROWS_WITH(gpt::gpt2_pretokenize("ok\xc3", "prompt"), Contains("prompt is not valid UTF-8"));
}
