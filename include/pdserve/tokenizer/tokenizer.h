// Kimi's tiktoken-style tokenizer: byte-level BPE by rank over pieces cut by Kimi's regex,
// plus 256 special tokens. Loads the same two files as the reference
// (tiktoken.model, tokenizer_config.json). Immutable after load; safe to share across threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::tokenizer {

using TokenId = int32_t;

class Tokenizer {
 public:
  // Reads DIR/tiktoken.model and DIR/tokenizer_config.json.
  static Result<Tokenizer> load(const std::string& dir);
  // ranks[r] = bytes of rank r (all 256 single bytes must be present); specials id -> text for
  // ids in [ranks.size(), ranks.size() + 256); missing ones become "<|reserved_token_{id}|>".
  static Result<Tokenizer> build(std::vector<std::string> ranks, const std::map<TokenId, std::string>& specials,
                                 std::string bos = "[BOS]", std::string eos = "[EOS]", std::string pad = "[PAD]");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Encodes like Kimi's TikTokenTokenizer.encode. allow_special=false (the default, for user
  // text): "<|open|>" etc. are plain text. allow_special=true: special-token text becomes the
  // special id. Invalid UTF-8 is first repaired to U+FFFD per maximal ill-formed subpart.
  std::vector<TokenId> encode(std::string_view text, bool allow_special = false) const;
  void encode_append(std::string_view text, bool allow_special, std::vector<TokenId>* out) const;

  // Concatenated token bytes (specials as their text). May be invalid UTF-8 if the ids cut a
  // character; pass through utf8::sanitize for display. Unknown ids are an error.
  Result<std::string> decode(std::span<const TokenId> ids) const;
  // Bytes of one token; empty for an id outside the vocabulary.
  std::string_view token_bytes(TokenId id) const;

  std::optional<TokenId> special_id(std::string_view text) const;
  bool is_special(TokenId id) const { return id >= num_ranks() && id < vocab_size(); }
  int32_t num_ranks() const;   // ordinary (BPE) tokens: ids 0 .. num_ranks-1
  int32_t vocab_size() const;  // num_ranks + 256
  TokenId bos_id() const;      // tokenizer_config.json bos_token
  TokenId eos_id() const;      // tokenizer_config.json eos_token ([EOS]; chat turns stop on <|end_of_msg|>)
  TokenId pad_id() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// File formats, exposed for the tiny-model writer and tests.
Result<std::vector<std::string>> read_tiktoken_model(const std::string& path);
Status write_tiktoken_model(const std::string& path, const std::vector<std::string>& ranks);

}  // namespace pdserve::tokenizer
