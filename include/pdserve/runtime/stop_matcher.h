// Stop strings over a text stream that arrives in arbitrary pieces. Text that could still be
// the start of a stop string is held back, so a stop string never leaks into the output even
// when it is split across tokens.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pdserve::runtime {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  struct Out {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string matched; text is everything before it
  };
  // Feeds more text. After a stop, further pushes return nothing.
  Out push(std::string_view text);
  // End of stream without a stop: everything held back.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace pdserve::runtime
