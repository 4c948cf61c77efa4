// pdserve tokenize --model DIR [--chat] [--decode] [--allow-special] [--no-think] [--text]
// Reads stdin. Plain: text -> JSON array of ids. --chat: an OpenAI messages array (or an
// object with "messages" and optional "tools", "tool_choice", "response_format") -> ids of
// the Kimi-K3 framed conversation. --decode: a JSON array of ids -> text.
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "pdserve/tokenizer/chat_k3.h"
#include "pdserve/tokenizer/tokenizer.h"
#include "pdserve/tokenizer/utf8.h"

namespace pdserve::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  bool chat = false;
  bool decode = false;
  bool allow_special = false;
  bool no_think = false;
  bool no_generation_prompt = false;
  bool text = false;
  std::string effort = "max";
};

[[noreturn]] void fail(const std::string& msg) {
  std::cerr << "pdserve tokenize: " << msg << '\n';
  throw CLI::RuntimeError(1);
}

Status run(const TokenizeArgs& a) {
  PDS_ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::load(a.model));
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (a.decode) {
    auto j = nlohmann::json::parse(input, nullptr, false);
    if (j.is_discarded() || !j.is_array()) return invalid_argument("--decode expects a JSON array of ids on stdin");
    std::vector<tokenizer::TokenId> ids;
    for (const auto& v : j) {
      if (!v.is_number_integer()) return invalid_argument("--decode: ids must be integers");
      ids.push_back(v.get<tokenizer::TokenId>());
    }
    PDS_ASSIGN_OR_RETURN(std::string bytes, tok.decode(ids));
    std::cout << tokenizer::utf8::sanitize(bytes);
    return Status::ok();
  }
  std::vector<tokenizer::TokenId> ids;
  if (a.chat) {
    auto j = tokenizer::OrderedJson::parse(input, nullptr, false);
    if (j.is_discarded()) return invalid_argument("--chat expects JSON on stdin");
    tokenizer::OrderedJson messages = j, tools = nullptr;
    tokenizer::ChatOptions opts;
    if (j.is_object()) {
      messages = j.value("messages", tokenizer::OrderedJson());
      tools = j.value("tools", tokenizer::OrderedJson());
      opts.tool_choice = j.value("tool_choice", tokenizer::OrderedJson());
      opts.response_format = j.value("response_format", tokenizer::OrderedJson());
    }
    opts.thinking = !a.no_think;
    opts.add_generation_prompt = !a.no_generation_prompt;
    opts.thinking_effort = a.effort == "none" ? std::nullopt : std::optional<std::string>(a.effort);
    PDS_ASSIGN_OR_RETURN(auto segments, tokenizer::render_k3_chat(messages, tools, opts));
    if (a.text) {
      std::cout << tokenizer::join_segments(segments);
      return Status::ok();
    }
    ids = tokenizer::encode_segments(tok, segments);
  } else {
    ids = tok.encode(input, a.allow_special);
  }
  std::cout << nlohmann::json(ids).dump() << '\n';
  return Status::ok();
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode stdin to token ids (or decode ids) with a model's tokenizer");
  cmd->add_option("--model", args->model, "Model directory (tiktoken.model, tokenizer_config.json)")->required();
  cmd->add_flag("--chat", args->chat, "stdin is an OpenAI messages array (or request object): print the K3-framed ids");
  cmd->add_flag("--decode", args->decode, "stdin is a JSON array of ids: print the text");
  cmd->add_flag("--allow-special", args->allow_special, "plain mode: turn special-token text into special ids");
  cmd->add_flag("--no-think", args->no_think, "--chat: render without the think channel");
  cmd->add_flag("--no-generation-prompt", args->no_generation_prompt, "--chat: do not open an assistant turn");
  cmd->add_option("--thinking-effort", args->effort, "--chat: low|medium|high|max|none (default max)");
  cmd->add_flag("--text", args->text, "--chat: print the rendered text instead of ids");
  cmd->callback([args] {
    if (args->chat && args->decode) fail("--chat and --decode are exclusive");
    Status st = run(*args);
    if (!st.is_ok()) fail(st.to_string());
  });
}

}  // namespace pdserve::cli
