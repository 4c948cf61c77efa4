// Encode arbitrary bytes (invalid UTF-8 included) with a small Kimi-format tokenizer:
// never a crash, every id in the vocabulary, and decode(encode(x)) == x for valid UTF-8.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pdserve/tokenizer/tiny_tokenizer.h"
#include "pdserve/tokenizer/tokenizer.h"
#include "pdserve/tokenizer/utf8.h"

using namespace pdserve::tokenizer;

static const Tokenizer& tok() {
  static Tokenizer* t = [] {
    auto ranks = train_tiny_ranks(1024);
    if (!ranks.is_ok()) std::abort();
    auto built = Tokenizer::build(*ranks, {{1024, "[BOS]"}, {1025, "[EOS]"}, {1026, "<|end_of_msg|>"}, {1027, "<|open|>"}, {1279, "[PAD]"}});
    if (!built.is_ok()) { std::fprintf(stderr, "%s\n", built.status().message().c_str()); std::abort(); }
    return new Tokenizer(std::move(built).value());
  }();
  return *t;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool specials : {false, true}) {
    auto ids = tok().encode(text, specials);
    for (TokenId id : ids)
      if (id < 0 || id >= tok().vocab_size()) std::abort();
    if (!specials && utf8::is_valid(text)) {
      auto back = tok().decode(ids);
      if (!back.is_ok() || *back != text) std::abort();
    }
  }
  return 0;
}
