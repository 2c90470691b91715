#pragma once
// Finds stop strings in streamed text. Text that could still become the start
// of a stop string is held back, so a client never sees part of a stop string.
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops);

  // Appends text; returns what can be emitted now. After a match, returns the
  // text before the stop string and stopped() is true.
  std::string push(std::string_view text);
  // The held-back remainder, at the end of generation.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace troupe
