// Parsing JSON from users and files with bounded nesting.
//
// nlohmann's parser is iterative, but copying, comparing and dumping a value recurse once
// per level: a document nested a few hundred thousand levels deep (a hostile --config, an
// import line, a kernel sidecar) would overflow the stack long after it parsed. Every JSON
// text that comes from outside the process goes through parse_json_bounded, which refuses
// such documents while parsing, before any recursive operation sees them.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace tf {

// Deeper than any document tunefarm writes (configs and records nest 3 levels).
constexpr int kMaxJsonDepth = 64;

// Thrown for well-formed JSON that is refused: nesting deeper than kMaxJsonDepth, or a number
// beyond double's range (1e400). A std::invalid_argument, like the other per-line import
// errors.
class JsonRefused : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Parses `text`; throws nlohmann::json::parse_error for malformed JSON and JsonRefused for
// nesting deeper than `max_depth` or numbers out of range. Nothing else escapes.
inline nlohmann::json parse_json_bounded(const std::string& text, int max_depth = kMaxJsonDepth) {
  try {
    return nlohmann::json::parse(text, [max_depth](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
      if ((event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start) &&
          depth >= max_depth) {
        throw JsonRefused("JSON nested deeper than " + std::to_string(max_depth) + " levels");
      }
      return true;
    });
  } catch (const nlohmann::json::out_of_range& e) {
    // Found by fuzzing: "2E2222" is valid JSON, but no double holds it.
    throw JsonRefused(std::string("JSON number out of range (") + e.what() + ")");
  }
}

}  // namespace tf
