#include "pdserve/server/openai_response.h"

#include <atomic>
#include <chrono>

#include "pdserve/tokenizer/special_tokens.h"
#include "pdserve/tokenizer/utf8.h"

namespace pdserve::server {

namespace tk = pdserve::tokenizer;

const char* api_finish_reason(runtime::FinishReason r) {
  switch (r) {
    case runtime::FinishReason::kStop: return "stop";
    case runtime::FinishReason::kLength: return "length";
    case runtime::FinishReason::kAbort: return "abort";
    case runtime::FinishReason::kError: return "error";
    default: return nullptr;
  }
}

ChatDeltaTracker::Delta ChatDeltaTracker::push(const std::string& more, bool final) {
  text_ += more;
  std::string_view view = text_;
  if (!final) {
    // Hold back from the last <|open|> / <|close|> whose <|sep|> has not arrived yet.
    const size_t o = view.rfind(tk::kOpen), c = view.rfind(tk::kClose);
    size_t cut = std::string_view::npos;
    if (o != std::string_view::npos) cut = o;
    if (c != std::string_view::npos && (cut == std::string_view::npos || c > cut)) cut = c;
    if (cut != std::string_view::npos && view.find(tk::kSep, cut) == std::string_view::npos) view = view.substr(0, cut);
  }
  tk::ParsedAssistant p = tk::parse_k3_assistant_output(view, opened_think_);
  Delta d;
  // Only ever extend what was sent; a parse that would take text back is held until final.
  if (p.reasoning_content.size() > sent_reasoning_) {
    d.reasoning = p.reasoning_content.substr(sent_reasoning_);
    sent_reasoning_ = p.reasoning_content.size();
  }
  if (p.content.size() > sent_content_) {
    d.content = p.content.substr(sent_content_);
    sent_content_ = p.content.size();
  }
  if (final) d.tool_calls = std::move(p.tool_calls);
  return d;
}

namespace {
std::string new_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  const auto now = std::chrono::system_clock::now().time_since_epoch().count();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%llx%04llx", prefix, static_cast<unsigned long long>(now),
                static_cast<unsigned long long>(counter.fetch_add(1) & 0xffff));
  return buf;
}
std::string sse(const Json& j) { return "data: " + j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n"; }
}  // namespace

ResponseFormatter::ResponseFormatter(const ParsedRequest& req, std::string model, const tk::Tokenizer& tok)
    : req_(req),
      model_(std::move(model)),
      tok_(tok),
      id_(new_id(req.kind == ApiKind::kChat ? "chatcmpl" : "cmpl")),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()),
      chat_(req.opened_think) {}

Json ResponseFormatter::base(const char* object) const {
  return Json{{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

std::string ResponseFormatter::token_text(int32_t id) const { return tk::utf8::sanitize(tok_.token_bytes(id)); }

Json ResponseFormatter::usage(const runtime::RequestEvent& ev) {
  return Json{{"prompt_tokens", ev.prompt_tokens},
              {"completion_tokens", ev.completion_tokens},
              {"total_tokens", ev.prompt_tokens + ev.completion_tokens}};
}

Json ResponseFormatter::completion_logprobs(const std::vector<runtime::TokenLogprob>& lps) {
  Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(), offsets = Json::array();
  for (const auto& lp : lps) {
    const std::string t = token_text(lp.id);
    tokens.push_back(t);
    token_lps.push_back(lp.logprob);
    Json top = Json::object();
    for (const auto& c : lp.top) top[token_text(c.id)] = c.logprob;
    tops.push_back(top);
    offsets.push_back(text_offset_);
    text_offset_ += static_cast<int64_t>(t.size());
  }
  return Json{{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

Json ResponseFormatter::chat_logprobs(const std::vector<runtime::TokenLogprob>& lps) const {
  auto entry = [&](int32_t id, float lp) {
    const std::string_view raw = tok_.token_bytes(id);
    Json bytes = Json::array();
    for (unsigned char c : raw) bytes.push_back(static_cast<int>(c));
    return Json{{"token", token_text(id)}, {"logprob", lp}, {"bytes", bytes}};
  };
  Json content = Json::array();
  for (const auto& lp : lps) {
    Json e = entry(lp.id, lp.logprob);
    Json top = Json::array();
    for (const auto& c : lp.top) top.push_back(entry(c.id, c.logprob));
    e["top_logprobs"] = top;
    content.push_back(e);
  }
  return Json{{"content", content}};
}

Json ResponseFormatter::tool_calls_json(const std::vector<tk::ParsedToolCall>& calls) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i)
    out.push_back({{"index", i},
                   {"id", new_id("call")},
                   {"type", "function"},
                   {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}});
  return out;
}

Json ResponseFormatter::full(const runtime::RequestEvent& all) {
  const char* fr = api_finish_reason(all.finish_reason);
  Json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", fr ? Json(fr) : Json(nullptr)}};
  Json out;
  if (req_.kind == ApiKind::kCompletion) {
    out = base("text_completion");
    choice["text"] = all.text;
    if (req_.gen.sampling.logprobs) choice["logprobs"] = completion_logprobs(all.logprobs);
  } else {
    out = base("chat.completion");
    tk::ParsedAssistant p = tk::parse_k3_assistant_output(all.text, req_.opened_think);
    Json msg = {{"role", "assistant"}, {"content", p.content}};
    if (req_.opened_think) msg["reasoning_content"] = p.reasoning_content;
    if (!p.tool_calls.empty()) {
      msg["tool_calls"] = tool_calls_json(p.tool_calls);
      if (all.finish_reason == runtime::FinishReason::kStop) choice["finish_reason"] = "tool_calls";
    }
    choice["message"] = msg;
    if (req_.gen.sampling.logprobs) choice["logprobs"] = chat_logprobs(all.logprobs);
  }
  out["choices"] = Json::array({choice});
  out["usage"] = usage(all);
  return out;
}

std::vector<std::string> ResponseFormatter::chunks(const runtime::RequestEvent& ev) {
  std::vector<std::string> out;
  const char* fr = ev.finished ? api_finish_reason(ev.finish_reason) : nullptr;
  const Json finish = fr ? Json(fr) : Json(nullptr);
  const bool has_lp = req_.gen.sampling.logprobs && !ev.logprobs.empty();
  if (req_.kind == ApiKind::kCompletion) {
    if (!ev.text.empty() || has_lp || ev.finished) {
      Json c = base("text_completion");
      Json choice = {{"index", 0}, {"text", ev.text}, {"logprobs", nullptr}, {"finish_reason", finish}};
      if (has_lp) choice["logprobs"] = completion_logprobs(ev.logprobs);
      c["choices"] = Json::array({choice});
      if (req_.include_usage) c["usage"] = nullptr;
      out.push_back(sse(c));
    }
  } else {
    auto chunk = [&](Json delta, Json fin, bool lp) {
      Json c = base("chat.completion.chunk");
      Json choice = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", std::move(fin)}};
      if (lp) choice["logprobs"] = chat_logprobs(ev.logprobs);
      c["choices"] = Json::array({choice});
      if (req_.include_usage) c["usage"] = nullptr;
      out.push_back(sse(c));
    };
    if (!sent_role_) {
      chunk(Json{{"role", "assistant"}, {"content", ""}}, nullptr, false);
      sent_role_ = true;
    }
    ChatDeltaTracker::Delta d = chat_.push(ev.text, ev.finished);
    Json delta = Json::object();
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.content.empty()) delta["content"] = d.content;
    Json fin = finish;
    if (!d.tool_calls.empty()) {
      delta["tool_calls"] = tool_calls_json(d.tool_calls);
      if (ev.finish_reason == runtime::FinishReason::kStop) fin = "tool_calls";
    }
    if (!delta.empty() || has_lp || ev.finished) chunk(delta, fin, has_lp);
  }
  if (ev.finished) {
    if (req_.include_usage) {
      Json u = base(req_.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion");
      u["choices"] = Json::array();
      u["usage"] = usage(ev);
      out.push_back(sse(u));
    }
    out.push_back("data: [DONE]\n\n");
  }
  return out;
}

}  // namespace pdserve::server
