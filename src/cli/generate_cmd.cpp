// pdserve generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N]
// Greedy generation straight on the model layer, for debugging a checkpoint without a server.
#include <iostream>

#include "commands.h"
#include "pdserve/core/json_util.h"
#include "pdserve/model/model.h"
#include "pdserve/tokenizer/tokenizer.h"
#include "pdserve/tokenizer/utf8.h"

namespace pdserve::cli {

namespace {

int run_generate(const std::string& dir, const std::string& prompt, std::vector<int32_t> ids, int max_tokens, int64_t page_size,
                 DType kv_dtype) {
  auto model = Model::load(dir);
  if (!model.is_ok()) {
    std::cerr << "generate: " << model.status().message() << "\n";
    return 1;
  }
  const ModelConfig& cfg = (*model)->config();
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (ids.empty()) {
    auto t = tokenizer::Tokenizer::load(dir);
    if (!t.is_ok()) {
      std::cerr << "generate: " << t.status().message() << "\n";
      return 1;
    }
    tok = std::make_unique<tokenizer::Tokenizer>(std::move(t).value());
    ids = tok->encode(prompt, /*allow_special=*/false);
  }
  const int64_t total = static_cast<int64_t>(ids.size()) + max_tokens;
  auto kv = MlaKvPool::for_model(cfg, (total + page_size - 1) / page_size, page_size, kv_dtype);
  auto state = KdaStatePool::for_model(cfg, 1);
  ModelCaches caches{kv.get(), state.get()};
  SequenceInput seq;
  seq.tokens = ids;
  seq.pages = kv->allocate(kv->num_pages()).value();
  seq.state_slot = state->allocate().value();
  std::vector<int32_t> out;
  ForwardOutput fo;
  for (int i = 0; i < max_tokens; ++i) {
    ForwardBatch b{{seq}};
    Status st = (*model)->forward(b, caches, &fo);
    if (!st.is_ok()) {
      std::cerr << "generate: " << st.message() << "\n";
      return 1;
    }
    const float* row = fo.row(0);
    int32_t best = 0;
    for (int64_t v = 1; v < cfg.vocab_size; ++v)
      if (row[v] > row[best]) best = static_cast<int32_t>(v);
    out.push_back(best);
    seq.cached_len += static_cast<int64_t>(seq.tokens.size());
    seq.tokens = {best};
  }
  Json j = {{"prompt_ids", ids}, {"output_ids", out}};
  if (tok) {
    auto text = tok->decode(out);
    if (text.is_ok()) j["output_text"] = tokenizer::utf8::sanitize(*text);  // ids may cut a character
  }
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Greedy generation on the model layer (no server), for debugging");
  struct Opts {
    std::string model, prompt;
    std::vector<int32_t> ids;
    int max_tokens = 16;
    int64_t page_size = 64;
    DType kv_dtype = DType::kF32;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Model directory")->required();
  cmd->add_option("--prompt", o->prompt, "Prompt text");
  cmd->add_option("--prompt-ids", o->ids, "Prompt token ids")->delimiter(',');
  cmd->add_option("--max-tokens", o->max_tokens, "Tokens to generate")->check(CLI::Range(1, 100000));
  cmd->add_option("--page-size", o->page_size, "KV page size")->check(CLI::Range(1, 4096));
  add_kv_cache_dtype_option(cmd, &o->kv_dtype, "MLA latent cache dtype: float32 or bfloat16");
  cmd->callback([o]() { std::exit(run_generate(o->model, o->prompt, o->ids, o->max_tokens, o->page_size, o->kv_dtype)); });
}

}  // namespace pdserve::cli
