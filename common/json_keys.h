/// @file
/// A JSON object whose keys are each given once. nlohmann keeps the last of two equal
/// keys without a word; a file that sets a key twice (a config, a line of a choices
/// file) is a mistake whichever value was meant, so the parse stops at the second one.
#pragma once
#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace gpt {

/// Parses `text` as J (nlohmann::json or nlohmann::ordered_json) and calls
/// `twice(name)`, which must throw, at the first key of the top-level object given a
/// second time. nlohmann's parse errors are left to the caller, which words them.
template <class J, class Twice>
J parse_json_keys_once(const std::string& text, Twice&& twice) {
  std::set<std::string> keys;
  const auto note_key = [&](int depth, typename J::parse_event_t event, J& parsed) {
    if (event == J::parse_event_t::key && depth == 1 && !keys.insert(parsed.template get<std::string>()).second)
      twice(parsed.template get<std::string>());
    return true;
  };
  return J::parse(text, note_key);
}

}  // namespace gpt
