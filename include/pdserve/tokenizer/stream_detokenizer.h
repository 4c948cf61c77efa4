// Incremental detokeniser for streaming responses. Each push() returns only text that is
// final: whole UTF-8 characters, never a partial one. Bytes that can never become valid are
// emitted as U+FFFD exactly where a one-shot utf8::sanitize(decode(ids)) would put them, so the
// concatenation of all push() results and finish() equals that one-shot decode for any way of
// splitting the id sequence.
#pragma once

#include <span>
#include <string>

#include "pdserve/core/status.h"
#include "pdserve/tokenizer/tokenizer.h"

namespace pdserve::tokenizer {

class StreamDetokenizer {
 public:
  // The tokenizer must outlive this object. skip_special drops special tokens from the text.
  explicit StreamDetokenizer(const Tokenizer& tok, bool skip_special = false)
      : tok_(&tok), skip_special_(skip_special) {}

  // Text made final by these ids; an unknown id is an error and leaves the state unchanged.
  Result<std::string> push(std::span<const TokenId> ids);
  Result<std::string> push(TokenId id) { return push(std::span<const TokenId>(&id, 1)); }
  // End of stream: a dangling partial character becomes U+FFFD.
  std::string finish();
  // Bytes held back waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace pdserve::tokenizer
