#include "pdserve/tokenizer/tiny_tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "bpe_trainer.h"
#include "pdserve/tokenizer/special_tokens.h"
#include "pdserve/tokenizer/tokenizer.h"
#include "pretokenizer.h"
#include "tiny_corpus.h"

namespace pdserve::tokenizer {

Result<std::vector<std::string>> train_tiny_ranks(int num_ranks) {
  if (num_ranks < 256 || num_ranks > 32768)
    return invalid_argument("tiny tokenizer num_ranks must be in 256..32768, got " + std::to_string(num_ranks));
  PDS_ASSIGN_OR_RETURN(auto pre, PreTokenizer::create(kKimiPatternPcre2));
  // Corpus grows with the request so large vocabularies still find pairs to merge.
  const size_t bytes = 64 * 1024 + static_cast<size_t>(num_ranks) * 64;
  return train_bpe(*pre, tiny_training_corpus(bytes), num_ranks);
}

Status write_tokenizer_config(const std::string& path, int num_ranks) {
  // Key layout follows Kimi's tokenizer_config.json as far as the engine reads it.
  nlohmann::ordered_json decoder = nlohmann::ordered_json::object();
  for (int k = 0; k < kNumReservedSpecialTokens; ++k) {
    const int id = num_ranks + k;
    std::string content = "<|reserved_token_" + std::to_string(id) + "|>";
    for (const auto& slot : kKimiSpecialSlots)
      if (slot.offset == k) content = std::string(slot.name);
    decoder[std::to_string(id)] = {{"content", content}, {"lstrip", false}, {"normalized", false},
                                   {"rstrip", false},    {"single_word", false}, {"special", true}};
  }
  nlohmann::ordered_json cfg = {
      {"added_tokens_decoder", decoder},
      {"additional_special_tokens", {std::string(kEndOfMsg), std::string(kOpen), std::string(kClose), std::string(kSep)}},
      {"bos_token", std::string(kBos)},
      {"clean_up_tokenization_spaces", false},
      {"eos_token", std::string(kEos)},
      {"model_max_length", 1048576},
      {"pad_token", std::string(kPad)},
      {"tokenizer_class", "TikTokenTokenizer"},
      {"unk_token", std::string(kUnk)},
  };
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return io_error("cannot write " + path);
  f << cfg.dump(2) << '\n';
  f.close();
  if (!f) return io_error("write failed: " + path);
  return Status::ok();
}

Status write_tiny_tokenizer(const std::string& dir, int num_ranks) {
  PDS_ASSIGN_OR_RETURN(auto ranks, train_tiny_ranks(num_ranks));
  PDS_RETURN_IF_ERROR(write_tiktoken_model(dir + "/tiktoken.model", ranks));
  return write_tokenizer_config(dir + "/tokenizer_config.json", num_ranks);
}

}  // namespace pdserve::tokenizer
