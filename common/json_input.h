/// @file
/// JSON text from a file a user hands in (a config, a checkpoint manifest, a line of a
/// choices file), parsed with three refusals nlohmann does not make itself:
///   - a key of the top-level object given twice: nlohmann keeps the last without a
///     word, and a file that sets a key twice is a mistake whichever value was meant;
///   - nesting deeper than kMaxJsonDepth: no file of the project nests past four levels,
///     and nlohmann's dump, which an error message uses to quote a value, recurses once a
///     level (a file nested 100,000 deep overflowed the stack);
///   - a NUL byte: JSON text has none (a string holds one as the escape `\\u0000`), and nlohmann reads
///     no further than one, so whatever followed it went unread.
#pragma once
#include <exception>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace gpt {

/// The deepest nesting parse_json_input accepts: arrays and objects within each other.
constexpr int kMaxJsonDepth = 64;

/// Parses `text` as J (nlohmann::json or nlohmann::ordered_json). Calls `refuse(reason)`,
/// which must throw, at a NUL byte, at the first key of the top-level object given a
/// second time, or at nesting deeper than kMaxJsonDepth; the reason reads after the
/// name of the file ("key 'lr' is given twice"). nlohmann's own parse errors are left to
/// the caller, which words them.
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
  return J::parse(text, check);
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
