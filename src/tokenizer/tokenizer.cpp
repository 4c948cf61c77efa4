#include "pdserve/tokenizer/tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "bpe.h"
#include "pdserve/tokenizer/special_tokens.h"
#include "pdserve/tokenizer/utf8.h"
#include "pretokenizer.h"

namespace pdserve::tokenizer {
namespace {

// Kimi's _encode_text_piece limits (tokenization_kimi.py): tiktoken is fed at most 400,000
// characters at a time, and no run of more than 25,000 whitespace / non-whitespace characters
// (Python str.isspace). These cuts change ids for huge inputs, so we make the same cuts.
constexpr size_t kMaxEncodeChars = 400'000;
constexpr size_t kMaxRunChars = 25'000;

// Calls f(chunk) for the pieces Kimi's encoder would hand to tiktoken one by one.
template <typename F>
void for_each_chunk(std::string_view s, F&& f) {
  if (s.size() <= kMaxRunChars) {  // fewer bytes than the run limit: no cut possible
    f(s);
    return;
  }
  size_t i = 0, chunk_start = 0, slice_start = 0, chars_in_chunk = 0, run = 0;
  bool run_space = false;
  while (i < s.size()) {
    if (chars_in_chunk == kMaxEncodeChars) {  // a 400k-character boundary restarts everything
      f(s.substr(slice_start, i - slice_start));
      chunk_start = slice_start = i;
      chars_in_chunk = 0;
    }
    const size_t at = i;
    const bool space = utf8::is_python_space(utf8::next_code_point(s, &i));
    if (chars_in_chunk == 0 || space != run_space) {
      run = 1;
      run_space = space;
    } else if (++run > kMaxRunChars) {
      f(s.substr(slice_start, at - slice_start));
      slice_start = at;
      run = 1;
    }
    ++chars_in_chunk;
  }
  (void)chunk_start;
  f(s.substr(slice_start));
}

std::string token_field(const nlohmann::json& cfg, const char* key, std::string fallback) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return fallback;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return fallback;
}

}  // namespace

struct Tokenizer::Impl {
  RankTable table;
  std::shared_ptr<const PreTokenizer> pre;
  std::vector<std::string> specials;  // index id - num_ranks
  std::unordered_map<std::string, TokenId> special_ids;
  std::vector<size_t> special_lengths;  // distinct lengths, for the allow_special scan
  std::string special_first_bytes;      // first bytes of all special texts
  int32_t num_ranks = 0;
  TokenId bos = -1, eos = -1, pad = -1;

  void encode_ordinary(std::string_view text, std::vector<TokenId>* out) const {
    Status st = pre->for_each_piece(text, [&](std::string_view piece) { bpe_encode_piece(table, piece, out); });
    (void)st;  // PCRE2 failures are limited to resource errors that the fallback matcher removes
  }

  // Leftmost special-token text in s at or after pos; npos if none.
  size_t find_special(std::string_view s, size_t pos, TokenId* id, size_t* len) const {
    for (size_t i = s.find_first_of(special_first_bytes, pos); i != std::string_view::npos;
         i = s.find_first_of(special_first_bytes, i + 1)) {
      for (size_t l : special_lengths) {
        if (i + l > s.size()) continue;
        auto it = special_ids.find(std::string(s.substr(i, l)));
        if (it != special_ids.end()) {
          *id = it->second;
          *len = l;
          return i;
        }
      }
    }
    return std::string_view::npos;
  }

  void encode_chunk(std::string_view s, bool allow_special, std::vector<TokenId>* out) const {
    if (!allow_special) {
      encode_ordinary(s, out);
      return;
    }
    size_t pos = 0;
    while (pos <= s.size()) {
      TokenId id;
      size_t len;
      const size_t at = find_special(s, pos, &id, &len);
      if (at == std::string_view::npos) {
        encode_ordinary(s.substr(pos), out);
        return;
      }
      encode_ordinary(s.substr(pos, at - pos), out);
      out->push_back(id);
      pos = at + len;
    }
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::build(std::vector<std::string> ranks, const std::map<TokenId, std::string>& specials,
                                   std::string bos, std::string eos, std::string pad) {
  auto impl = std::make_unique<Impl>();
  if (ranks.size() < 256) return data_loss("tiktoken vocabulary has " + std::to_string(ranks.size()) + " tokens, fewer than the 256 bytes");
  if (!impl->table.build(ranks)) return data_loss("tiktoken vocabulary holds the same bytes under two ranks");
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (impl->table.find(std::string_view(&c, 1)) == kNoRank)
      return data_loss("tiktoken vocabulary lacks the single byte " + std::to_string(b));
  }
  impl->num_ranks = static_cast<int32_t>(ranks.size());
  for (int32_t k = 0; k < kNumReservedSpecialTokens; ++k) {
    const TokenId id = impl->num_ranks + k;
    auto it = specials.find(id);
    std::string text = it != specials.end() ? it->second : "<|reserved_token_" + std::to_string(id) + "|>";
    if (text.empty()) return data_loss("special token " + std::to_string(id) + " has empty content");
    if (!impl->special_ids.emplace(text, id).second) return data_loss("special token text repeats: " + text);
    impl->specials.push_back(std::move(text));
  }
  for (auto& [id, text] : specials)
    if (id < impl->num_ranks || id >= impl->num_ranks + kNumReservedSpecialTokens)
      return data_loss("special token " + text + " has id " + std::to_string(id) + " outside " +
                       std::to_string(impl->num_ranks) + ".." + std::to_string(impl->num_ranks + 255));
  for (const auto& t : impl->specials) {
    if (impl->special_first_bytes.find(t[0]) == std::string::npos) impl->special_first_bytes += t[0];
    bool have = false;
    for (size_t l : impl->special_lengths) have |= l == t.size();
    if (!have) impl->special_lengths.push_back(t.size());
  }
  auto lookup = [&](const std::string& name, const char* what) -> Result<TokenId> {
    auto it = impl->special_ids.find(name);
    if (it == impl->special_ids.end()) return data_loss(std::string(what) + " '" + name + "' is not a special token");
    return it->second;
  };
  PDS_ASSIGN_OR_RETURN(impl->bos, lookup(bos, "bos_token"));
  PDS_ASSIGN_OR_RETURN(impl->eos, lookup(eos, "eos_token"));
  PDS_ASSIGN_OR_RETURN(impl->pad, lookup(pad, "pad_token"));
  PDS_ASSIGN_OR_RETURN(impl->pre, PreTokenizer::create(kKimiPatternPcre2));
  return Tokenizer(std::move(impl));
}

Result<Tokenizer> Tokenizer::load(const std::string& dir) {
  PDS_ASSIGN_OR_RETURN(auto ranks, read_tiktoken_model(dir + "/tiktoken.model"));
  const std::string cfg_path = dir + "/tokenizer_config.json";
  std::ifstream f(cfg_path);
  if (!f) return not_found("cannot open " + cfg_path);
  nlohmann::json cfg = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (cfg.is_discarded() || !cfg.is_object()) return data_loss(cfg_path + ": not a JSON object");
  std::map<TokenId, std::string> specials;
  if (auto it = cfg.find("added_tokens_decoder"); it != cfg.end() && it->is_object()) {
    for (auto& [key, val] : it->items()) {
      char* end = nullptr;
      const long id = std::strtol(key.c_str(), &end, 10);
      if (end == key.c_str() || *end != '\0' || !val.is_object() || !val.contains("content") || !val["content"].is_string())
        return data_loss(cfg_path + ": bad added_tokens_decoder entry '" + key + "'");
      specials[static_cast<TokenId>(id)] = val["content"].get<std::string>();
    }
  }
  // The reference only reads ids in the reserved block; ignore anything outside it likewise.
  const TokenId lo = static_cast<TokenId>(ranks.size());
  std::erase_if(specials, [&](const auto& kv) { return kv.first < lo || kv.first >= lo + kNumReservedSpecialTokens; });
  auto tok = build(std::move(ranks), specials, token_field(cfg, "bos_token", std::string(kBos)),
                   token_field(cfg, "eos_token", std::string(kEos)), token_field(cfg, "pad_token", std::string(kPad)));
  if (!tok.is_ok()) return tok.status().with_context(dir);
  return tok;
}

void Tokenizer::encode_append(std::string_view text, bool allow_special, std::vector<TokenId>* out) const {
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::sanitize(text);
    text = repaired;
  }
  for_each_chunk(text, [&](std::string_view chunk) { impl_->encode_chunk(chunk, allow_special, out); });
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  encode_append(text, allow_special, &out);
  return out;
}

std::string_view Tokenizer::token_bytes(TokenId id) const {
  if (id >= 0 && id < impl_->num_ranks) return impl_->table.bytes(static_cast<Rank>(id));
  if (is_special(id)) return impl_->specials[id - impl_->num_ranks];
  return {};
}

Result<std::string> Tokenizer::decode(std::span<const TokenId> ids) const {
  std::string out;
  out.reserve(ids.size() * 4);
  for (TokenId id : ids) {
    if (id < 0 || id >= vocab_size())
      return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                              std::to_string(vocab_size() - 1) + ")");
    out += token_bytes(id);
  }
  return out;
}

std::optional<TokenId> Tokenizer::special_id(std::string_view text) const {
  auto it = impl_->special_ids.find(std::string(text));
  if (it == impl_->special_ids.end()) return std::nullopt;
  return it->second;
}

int32_t Tokenizer::num_ranks() const { return impl_->num_ranks; }
int32_t Tokenizer::vocab_size() const { return impl_->num_ranks + kNumReservedSpecialTokens; }
TokenId Tokenizer::bos_id() const { return impl_->bos; }
TokenId Tokenizer::eos_id() const { return impl_->eos; }
TokenId Tokenizer::pad_id() const { return impl_->pad; }

}  // namespace pdserve::tokenizer
