// The K3 chat framing on arbitrary JSON: a clean error or ids, never a crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pdserve/tokenizer/chat_k3.h"
#include "pdserve/tokenizer/tiny_tokenizer.h"
#include "pdserve/tokenizer/tokenizer.h"

using namespace pdserve::tokenizer;

static const Tokenizer& tok() {
  static Tokenizer* t = [] {
    auto ranks = train_tiny_ranks(512);
    if (!ranks.is_ok()) std::abort();
    std::map<TokenId, std::string> specials = {{512, "[BOS]"}, {513, "[EOS]"}, {514, "<|end_of_msg|>"},
                                               {515, "<|open|>"}, {516, "<|close|>"}, {517, "<|sep|>"}, {767, "[PAD]"}};
    auto built = Tokenizer::build(*ranks, specials);
    if (!built.is_ok()) { std::fprintf(stderr, "%s\n", built.status().message().c_str()); std::abort(); }
    return new Tokenizer(std::move(built).value());
  }();
  return *t;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto j = OrderedJson::parse(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size, nullptr, false);
  if (j.is_discarded()) return 0;
  OrderedJson messages = j, tools = nullptr;
  if (j.is_object() && j.contains("messages")) {
    messages = j["messages"];
    if (j.contains("tools")) tools = j["tools"];
  }
  auto ids = encode_k3_chat(tok(), messages, tools, ChatOptions{});
  if (ids.is_ok())
    for (TokenId id : *ids)
      if (id < 0 || id >= tok().vocab_size()) std::abort();
  return 0;
}
