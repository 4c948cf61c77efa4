#include "pdserve/tokenizer/stream_detokenizer.h"

#include "pdserve/tokenizer/utf8.h"

namespace pdserve::tokenizer {

Result<std::string> StreamDetokenizer::push(std::span<const TokenId> ids) {
  for (TokenId id : ids)
    if (tok_->token_bytes(id).empty()) return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary");
  for (TokenId id : ids) {
    if (skip_special_ && tok_->is_special(id)) continue;
    pending_ += tok_->token_bytes(id);
  }
  // Maximal-subpart repair only ever looks forward from a sequence start, so everything
  // before the last incomplete sequence is already decided.
  std::string out;
  const size_t used = utf8::sanitize_prefix(pending_, &out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDetokenizer::finish() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace pdserve::tokenizer
