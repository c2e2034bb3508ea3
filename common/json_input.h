/// @file
/// JSON text from a file a user hands in (a config, a checkpoint manifest, a line of a
/// choices file), parsed with three refusals nlohmann does not make itself:
///   - a key of the top-level object given twice: nlohmann keeps the last without a
///     word, and a file that sets a key twice is a mistake whichever value was meant;
///   - nesting deeper than kMaxJsonDepth: no file of the project nests past four levels,
///     and nlohmann's dump, which an error message uses to quote a value, recurses once a
///     level (a file nested 100,000 deep overflowed the stack);
///   - a NUL byte: JSON text has none (a string holds one as the escape `\\u0000`), and nlohmann reads
///     no further than one, so whatever followed it went unread;
///   - a number too small for a double (1e-400): nlohmann reads it as 0 without a word, and
///     a setting such as grad_clip or weight_decay at 0 is switched off. (One too large,
///     1e400, nlohmann refuses itself.)
#pragma once
#include <cstdlib>
#include <exception>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace gpt {

/// The deepest nesting parse_json_input accepts: arrays and objects within each other.
constexpr int kMaxJsonDepth = 64;

/// The first number of JSON `text` (outside its strings) with a nonzero digit before its
/// exponent that reads as 0 (1e-400: below the smallest double), or "" when there is none.
inline std::string number_read_as_zero(const std::string& text) {
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character, a quote included
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c != '-' && (c < '0' || c > '9')) continue;
    size_t end = i;
    bool nonzero = false, exponent = false;
    for (; end < text.size() && std::string("0123456789+-.eE").find(text[end]) != std::string::npos; ++end) {
      exponent = exponent || text[end] == 'e' || text[end] == 'E';
      nonzero = nonzero || (!exponent && text[end] >= '1' && text[end] <= '9');
    }
    const std::string number = text.substr(i, end - i);
    if (nonzero && std::strtod(number.c_str(), nullptr) == 0.0) return number;
    i = end - 1;
  }
  return "";
}

/// Parses `text` as J (nlohmann::json or nlohmann::ordered_json). Calls `refuse(reason)`,
/// which must throw, at a NUL byte, at the first key of the top-level object given a
/// second time, at nesting deeper than kMaxJsonDepth, or (once the text has parsed) at a
/// nonzero number read as 0; the reason reads after the name of the file ("key 'lr' is
/// given twice"). nlohmann's own parse errors are left to the caller, which words them.
template <class J, class Refuse>
J parse_json_input(const std::string& text, Refuse&& refuse) {
  const size_t nul = text.find('\0');
  if (nul != std::string::npos)
    refuse("a NUL byte at offset " + std::to_string(nul) + " (JSON text has none; one inside a string is \\u0000)");
  std::set<std::string> keys;
  const auto check = [&](int depth, typename J::parse_event_t event, J& parsed) {
    using Event = typename J::parse_event_t;
    // depth counts the levels around the one that starts here
    if ((event == Event::object_start || event == Event::array_start) && depth >= kMaxJsonDepth)
      refuse("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels of arrays and objects");
    if (event == Event::key && depth == 1 && !keys.insert(parsed.template get<std::string>()).second)
      refuse("key '" + parsed.template get<std::string>() + "' is given twice");
    return true;
  };
  J parsed = J::parse(text, check);
  // After the parse, which words text that is no JSON (`0-1` is not a number) itself.
  if (const std::string tiny = number_read_as_zero(text); !tiny.empty())
    refuse("the number " + tiny + " is below the smallest double and would be read as 0; write 0 if 0 is meant");
  return parsed;
}

/// nlohmann's message without its "[json.exception.parse_error.101] " prefix: the rest
/// (line, column and what was expected) is the part worth showing a user.
inline std::string json_reason(const std::exception& e) {
  std::string message = e.what();
  const size_t bracket = message.find("] ");
  if (message.starts_with("[json.exception") && bracket != std::string::npos) message = message.substr(bracket + 2);
  return message;
}

}  // namespace gpt
