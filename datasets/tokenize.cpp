// tokenize: shows how a text is encoded, as the trainer encodes a prompt and prepare
// encodes a file (common/tokenizer.h).
//
//   build/bin/tokenize [--tokenizer FILE] [--pieces | --decode] < text
//
// Reads standard input and prints one line per token: its id and its bytes (C-escaped
// in quotes; a token that is not whole UTF-8 shows its high bytes as \xNN). --pieces
// prints GPT-2's pre-tokenizer pieces instead, one per line as the hex of their bytes;
// --decode reads ids (white-space separated) and writes their text.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/error.h"
#include "common/pretokenize.h"
#include "common/tokenizer.h"
#include "common/unicode.h"

namespace {

constexpr const char* kUsage =
    "usage: tokenize [--tokenizer FILE] [--pieces | --decode] < text\n"
    "\n"
    "Encodes standard input and prints a line per token: its id and its bytes.\n"
    "\n"
    "  --tokenizer FILE    a tokenizer file in llm.c's format (default: bytes)\n"
    "  --pieces            print GPT-2's pre-tokenizer pieces (hex of their bytes; no --tokenizer)\n"
    "  --decode            read token ids, write their text\n"
    "  --help              print this message\n";

// A token's bytes in quotes, C-escaped: control bytes as \xNN, and so are the bytes
// above 0x7F of a token that is not whole UTF-8 (GPT-2 cuts a character's bytes across
// tokens), which a terminal would show as the same replacement mark.
std::string quoted(const std::string& bytes) {
  bool utf8 = true;
  try {
    gpt::decode_utf8(bytes, "token");
  } catch (const gpt::UserError&) {
    utf8 = false;
  }
  std::string out = "\"";
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') out += std::string("\\") + c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (b < 0x20 || b == 0x7F || (b > 0x7F && !utf8)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", b);
      out += hex;
    } else out += c;
  }
  return out + "\"";
}

std::string hex(std::string_view bytes) {
  std::string out;
  char two[3];
  for (const char c : bytes) {
    std::snprintf(two, sizeof two, "%02x", static_cast<unsigned char>(c));
    out += two;
  }
  return out;
}

int run(int argc, char** argv) {
  if (gpt::asks_for_help(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::string tokenizer_name = "bytes";
  bool pieces = false, decode = false, tokenizer_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--tokenizer") {
      if (i + 1 >= argc) gpt::fail("flag --tokenizer needs a value");
      tokenizer_name = argv[++i];
      tokenizer_given = true;
    } else if (arg == "--pieces") {
      pieces = true;
    } else if (arg == "--decode") {
      decode = true;
    } else {
      gpt::fail("unknown argument '" + arg + "' (see --help)");
    }
  }
  if (pieces && decode) gpt::fail("--pieces and --decode exclude each other");
  // The pieces are GPT-2's pre-tokenizer's, the same for every tokenizer file: a file
  // named beside --pieces would go unread, so it is refused rather than ignored.
  if (pieces && tokenizer_given)
    gpt::fail("--pieces prints GPT-2's pre-tokenizer pieces, which no tokenizer file changes: drop --tokenizer "
              "(or drop --pieces to see that tokenizer's tokens)");
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());

  if (pieces) {
    for (const std::string_view piece : gpt::gpt2_pretokenize(input, "standard input"))
      std::printf("%s\n", hex(piece).c_str());
    return 0;
  }
  const gpt::Tokenizer tokenizer = gpt::Tokenizer::named(tokenizer_name);
  if (decode) {
    std::istringstream words(input);
    std::vector<int> ids;
    std::string word;
    while (words >> word) {
      size_t used = 0;
      int id = -1;
      try {
        id = std::stoi(word, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != word.size()) gpt::fail("standard input: '" + word + "' is not a token id");
      ids.push_back(id);
    }
    const std::string text = tokenizer.decode(ids);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  for (const int id : tokenizer.encode(input, "standard input"))
    std::printf("%d %s\n", id, quoted(tokenizer.token_bytes(id)).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("tokenize", [&] { return run(argc, argv); });
}
