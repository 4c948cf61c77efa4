// Field-by-field checks so that every error names what the client got wrong.
#include "pdserve/server/openai_request.h"

#include <algorithm>

#include "pdserve/tokenizer/chat_k3.h"
#include "pdserve/tokenizer/special_tokens.h"

namespace pdserve::server {

using OJ = nlohmann::ordered_json;

namespace {

Status bad(const std::string& field, const std::string& what) { return invalid_argument(field + ": " + what); }

Result<OJ> parse_body(const std::string& body) {
  OJ j = OJ::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Re-parse for the reason (invalid UTF-8 lands here too).
    try {
      OJ again = OJ::parse(body);
      (void)again;
    } catch (const OJ::exception& e) {
      return invalid_argument(std::string("body: malformed JSON: ") + e.what());
    }
    return invalid_argument("body: malformed JSON");
  }
  if (!j.is_object()) return invalid_argument("body: must be a JSON object");
  return j;
}

bool present(const OJ& b, const char* k) { return b.contains(k) && !b.at(k).is_null(); }

Status get_double(const OJ& b, const char* k, double* out) {
  if (!present(b, k)) return Status::ok();
  if (!b.at(k).is_number()) return bad(k, "must be a number");
  *out = b.at(k).get<double>();
  return Status::ok();
}

Status get_int(const OJ& b, const char* k, int64_t* out) {
  if (!present(b, k)) return Status::ok();
  if (!b.at(k).is_number_integer()) return bad(k, "must be an integer");
  *out = b.at(k).get<int64_t>();
  return Status::ok();
}

Status get_bool(const OJ& b, const char* k, bool* out) {
  if (!present(b, k)) return Status::ok();
  if (!b.at(k).is_boolean()) return bad(k, "must be a boolean");
  *out = b.at(k).get<bool>();
  return Status::ok();
}

// bootstrap_host / bootstrap_port / bootstrap_room: together or not at all.
Status parse_bootstrap(const OJ& b, ParsedRequest* r) {
  const bool h = present(b, "bootstrap_host"), p = present(b, "bootstrap_port"), rm = present(b, "bootstrap_room");
  if (!h && !p && !rm) return Status::ok();
  if (!h) return bad("bootstrap_host", "required with bootstrap_port and bootstrap_room");
  if (!p) return bad("bootstrap_port", "required with bootstrap_host and bootstrap_room");
  if (!rm) return bad("bootstrap_room", "required with bootstrap_host and bootstrap_port");
  BootstrapInfo info;
  if (!b.at("bootstrap_host").is_string() || b.at("bootstrap_host").get<std::string>().empty())
    return bad("bootstrap_host", "must be a non-empty string");
  info.host = b.at("bootstrap_host").get<std::string>();
  if (!b.at("bootstrap_port").is_number_integer()) return bad("bootstrap_port", "must be an integer");
  const int64_t port = b.at("bootstrap_port").get<int64_t>();
  if (port < 1 || port > 65535) return bad("bootstrap_port", "must be in [1, 65535]");
  info.port = static_cast<int>(port);
  const OJ& room = b.at("bootstrap_room");
  if (room.is_number_unsigned()) info.room = room.get<uint64_t>();
  else if (room.is_number_integer() && room.get<int64_t>() > 0) info.room = static_cast<uint64_t>(room.get<int64_t>());
  else return bad("bootstrap_room", "must be a positive integer");
  if (info.room == 0 || info.room >= (uint64_t{1} << 63)) return bad("bootstrap_room", "must be in [1, 2^63)");
  r->bootstrap = std::move(info);
  return Status::ok();
}

// Fields shared by both endpoints.
Status parse_common(const OJ& b, ParsedRequest* r) {
  PDS_RETURN_IF_ERROR(parse_bootstrap(b, r));
  runtime::SamplingParams& s = r->gen.sampling;
  if (present(b, "model")) {
    if (!b.at("model").is_string()) return bad("model", "must be a string");
    r->model = b.at("model").get<std::string>();
  }
  int64_t n = 1;
  PDS_RETURN_IF_ERROR(get_int(b, "n", &n));
  if (n != 1) return bad("n", "only n = 1 is supported; send several requests instead");
  if (present(b, "best_of")) {
    int64_t best_of = 1;
    PDS_RETURN_IF_ERROR(get_int(b, "best_of", &best_of));
    if (best_of != 1) return bad("best_of", "only best_of = 1 is supported");
  }
  PDS_RETURN_IF_ERROR(get_bool(b, "stream", &r->stream));
  if (present(b, "stream_options")) {
    const OJ& so = b.at("stream_options");
    if (!so.is_object()) return bad("stream_options", "must be an object");
    if (present(so, "include_usage")) {
      if (!so.at("include_usage").is_boolean()) return bad("stream_options.include_usage", "must be a boolean");
      r->include_usage = so.at("include_usage").get<bool>();
    }
  }
  PDS_RETURN_IF_ERROR(get_double(b, "temperature", &s.temperature));
  PDS_RETURN_IF_ERROR(get_double(b, "top_p", &s.top_p));
  PDS_RETURN_IF_ERROR(get_int(b, "top_k", &s.top_k));
  if (s.top_k == -1) s.top_k = 0;  // vLLM spells "off" as -1
  PDS_RETURN_IF_ERROR(get_double(b, "min_p", &s.min_p));
  PDS_RETURN_IF_ERROR(get_double(b, "presence_penalty", &s.presence_penalty));
  PDS_RETURN_IF_ERROR(get_double(b, "frequency_penalty", &s.frequency_penalty));
  PDS_RETURN_IF_ERROR(get_double(b, "repetition_penalty", &s.repetition_penalty));
  PDS_RETURN_IF_ERROR(get_bool(b, "ignore_eos", &s.ignore_eos));
  if (present(b, "seed")) {
    int64_t seed = 0;
    PDS_RETURN_IF_ERROR(get_int(b, "seed", &seed));
    s.seed = static_cast<uint64_t>(seed);
  }
  if (present(b, "stop")) {
    const OJ& st = b.at("stop");
    if (st.is_string()) {
      s.stop.push_back(st.get<std::string>());
    } else if (st.is_array()) {
      for (const auto& x : st) {
        if (!x.is_string()) return bad("stop", "must be a string or an array of strings");
        s.stop.push_back(x.get<std::string>());
      }
    } else {
      return bad("stop", "must be a string or an array of strings");
    }
  }
  if (present(b, "stop_token_ids")) {
    const OJ& st = b.at("stop_token_ids");
    if (!st.is_array()) return bad("stop_token_ids", "must be an array of integers");
    for (const auto& x : st) {
      if (!x.is_number_integer()) return bad("stop_token_ids", "must be an array of integers");
      s.stop_token_ids.push_back(x.get<int32_t>());
    }
  }
  return Status::ok();
}

// max_tokens: explicit values are checked by the engine (<= 0 and too long are errors there);
// here only the server's own cap. An absent value falls back to at most the cap.
Status parse_max_tokens(const OJ& b, const char* key, int64_t fallback, const RequestLimits& limits, ParsedRequest* r) {
  const int64_t cap = limits.max_completion_tokens;
  int64_t v = cap > 0 ? std::min(fallback, cap) : fallback;
  PDS_RETURN_IF_ERROR(get_int(b, key, &v));
  r->gen.sampling.max_tokens = v;
  if (v < 1) return bad(key, "must be >= 1");
  if (cap > 0 && v > cap)
    return bad(key, std::to_string(v) + " is more than this server's limit of " + std::to_string(cap) +
                        " completion tokens (max_completion_tokens)");
  return Status::ok();
}

Status check_prompt_tokens(const char* field, size_t n, const RequestLimits& limits) {
  if (limits.max_prompt_tokens > 0 && static_cast<int64_t>(n) > limits.max_prompt_tokens)
    return bad(field, std::to_string(n) + " prompt tokens is more than this server's limit of " +
                          std::to_string(limits.max_prompt_tokens) + " (max_prompt_tokens)");
  return Status::ok();
}

Result<std::vector<int32_t>> parse_prompt(const OJ& b, const tokenizer::Tokenizer& tok) {
  if (!present(b, "prompt")) return bad("prompt", "required");
  const OJ* p = &b.at("prompt");
  // A batch of one is accepted; real batches are not (n > 1 in disguise).
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  std::vector<int32_t> ids;
  if (p->is_string()) {
    const std::string text = p->get<std::string>();
    if (text.empty()) return bad("prompt", "must not be empty");
    ids = tok.encode(text, /*allow_special=*/false);
  } else if (p->is_array()) {
    if (p->empty()) return bad("prompt", "must not be empty");
    for (const auto& x : *p) {
      if (x.is_string() || x.is_array()) return bad("prompt", "batched prompts are not supported; send one per request");
      if (!x.is_number_integer()) return bad("prompt", "must be a string or an array of token ids");
      const int64_t id = x.get<int64_t>();
      if (id < 0 || id >= tok.vocab_size()) return bad("prompt", "token id " + std::to_string(id) + " is outside the vocabulary");
      ids.push_back(static_cast<int32_t>(id));
    }
  } else {
    return bad("prompt", "must be a string or an array of token ids");
  }
  return ids;
}

}  // namespace

Result<ParsedRequest> parse_completion_request(const std::string& body, const tokenizer::Tokenizer& tok,
                                               const RequestLimits& limits) {
  PDS_ASSIGN_OR_RETURN(OJ b, parse_body(body));
  ParsedRequest r;
  r.kind = ApiKind::kCompletion;
  PDS_RETURN_IF_ERROR(parse_common(b, &r));
  PDS_ASSIGN_OR_RETURN(r.gen.prompt, parse_prompt(b, tok));
  PDS_RETURN_IF_ERROR(check_prompt_tokens("prompt", r.gen.prompt.size(), limits));
  PDS_RETURN_IF_ERROR(parse_max_tokens(b, "max_tokens", limits.default_completion_max_tokens, limits, &r));
  if (present(b, "echo") && b.at("echo") != OJ(false)) return bad("echo", "is not supported");
  if (present(b, "logprobs")) {
    int64_t k = 0;
    PDS_RETURN_IF_ERROR(get_int(b, "logprobs", &k));
    if (k < 0 || k > 20) return bad("logprobs", "must be in [0, 20]");
    r.gen.sampling.logprobs = true;
    r.gen.sampling.top_logprobs = k;
  }
  r.gen.eos_token_ids = {tok.eos_id()};
  r.gen.skip_special_tokens = true;
  PDS_RETURN_IF_ERROR(r.gen.sampling.validate());
  return r;
}

Result<ParsedRequest> parse_chat_request(const std::string& body, const tokenizer::Tokenizer& tok,
                                         const RequestLimits& limits) {
  PDS_ASSIGN_OR_RETURN(OJ b, parse_body(body));
  ParsedRequest r;
  r.kind = ApiKind::kChat;
  PDS_RETURN_IF_ERROR(parse_common(b, &r));
  if (!present(b, "messages")) return bad("messages", "required");
  const OJ& messages = b.at("messages");
  if (!messages.is_array()) return bad("messages", "must be an array");
  if (messages.empty()) return bad("messages", "must not be empty");
  OJ tools = present(b, "tools") ? b.at("tools") : OJ();
  tokenizer::ChatOptions opts;
  if (present(b, "tool_choice")) opts.tool_choice = b.at("tool_choice");
  if (present(b, "response_format")) opts.response_format = b.at("response_format");
  if (present(b, "reasoning_effort")) {
    if (!b.at("reasoning_effort").is_string()) return bad("reasoning_effort", "must be a string");
    opts.thinking_effort = b.at("reasoning_effort").get<std::string>();
  }
  if (present(b, "chat_template_kwargs")) {
    const OJ& kw = b.at("chat_template_kwargs");
    if (!kw.is_object()) return bad("chat_template_kwargs", "must be an object");
    if (present(kw, "thinking")) {
      if (!kw.at("thinking").is_boolean()) return bad("chat_template_kwargs.thinking", "must be a boolean");
      opts.thinking = kw.at("thinking").get<bool>();
    }
  }
  PDS_ASSIGN_OR_RETURN(r.gen.prompt, tokenizer::encode_k3_chat(tok, messages, tools, opts));
  r.opened_think = opts.thinking;
  PDS_RETURN_IF_ERROR(check_prompt_tokens("messages", r.gen.prompt.size(), limits));
  const int64_t left = std::max<int64_t>(1, limits.max_model_len - static_cast<int64_t>(r.gen.prompt.size()));
  const char* key = present(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  PDS_RETURN_IF_ERROR(parse_max_tokens(b, key, left, limits, &r));
  if (present(b, "logprobs")) PDS_RETURN_IF_ERROR(get_bool(b, "logprobs", &r.gen.sampling.logprobs));
  PDS_RETURN_IF_ERROR(get_int(b, "top_logprobs", &r.gen.sampling.top_logprobs));
  if (r.gen.sampling.top_logprobs > 0 && !r.gen.sampling.logprobs) return bad("top_logprobs", "needs logprobs = true");
  r.gen.eos_token_ids = {tok.eos_id()};
  if (auto eom = tok.special_id(tokenizer::kEndOfMsg)) r.gen.eos_token_ids.push_back(*eom);
  r.gen.skip_special_tokens = false;  // the K3 output parser reads the framing tokens
  PDS_RETURN_IF_ERROR(r.gen.sampling.validate());
  return r;
}

}  // namespace pdserve::server
