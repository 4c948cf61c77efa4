#include "pdserve/tokenizer/chat_output.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "pdserve/tokenizer/special_tokens.h"

namespace pdserve::tokenizer {
namespace {

std::string marker(std::string_view ctl, std::string_view tag) {
  return std::string(ctl) + std::string(tag) + std::string(kSep);
}

std::string unescape_attr(std::string_view v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    if (v.substr(i, 6) == "&quot;") { out += '"'; i += 6; }
    else if (v.substr(i, 5) == "&amp;") { out += '&'; i += 5; }
    else out += v[i++];
  }
  return out;
}

// Reads attr="value" out of an open tag's text (between the tag name and <|sep|>).
std::optional<std::string> attr(std::string_view head, std::string_view key) {
  const std::string needle = " " + std::string(key) + "=\"";
  const size_t at = head.find(needle);
  if (at == std::string_view::npos) return std::nullopt;
  const size_t start = at + needle.size();
  const size_t end = head.find('"', start);
  if (end == std::string_view::npos) return std::nullopt;
  return unescape_attr(head.substr(start, end - start));
}

// Cursor over the completion.
struct Reader {
  std::string_view s;
  size_t pos = 0;
  bool take(std::string_view m) {
    if (s.substr(pos, m.size()) != m) return false;
    pos += m.size();
    return true;
  }
  // Text up to `m` (consumed too); the rest if m is absent.
  std::string_view until(std::string_view m, bool* found) {
    const size_t at = s.find(m, pos);
    *found = at != std::string_view::npos;
    std::string_view out = s.substr(pos, (*found ? at : s.size()) - pos);
    pos = *found ? at + m.size() : s.size();
    return out;
  }
  // An open tag "<|open|>NAME attrs<|sep|>"; returns the attr text.
  std::optional<std::string_view> open(std::string_view name) {
    const std::string head = std::string(kOpen) + std::string(name);
    if (s.substr(pos, head.size()) != head) return std::nullopt;
    const size_t sep = s.find(kSep, pos + head.size());
    if (sep == std::string_view::npos) return std::nullopt;
    std::string_view attrs = s.substr(pos + head.size(), sep - pos - head.size());
    if (!attrs.empty() && attrs[0] != ' ') return std::nullopt;
    pos = sep + kSep.size();
    return attrs;
  }
};

void parse_call(Reader& r, std::string_view head, ParsedAssistant* out) {
  ParsedToolCall call;
  call.name = attr(head, "tool").value_or("");
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  std::optional<std::string> raw;
  for (;;) {
    if (auto a = r.open("argument")) {
      const std::string key = attr(*a, "key").value_or("");
      const std::string type = attr(*a, "type").value_or("string");
      bool found;
      std::string value(r.until(marker(kClose, "argument"), &found));
      if (type == "string") {
        args[key] = value;
      } else {
        auto parsed = nlohmann::ordered_json::parse(value, nullptr, false);
        args[key] = parsed.is_discarded() ? nlohmann::ordered_json(value) : parsed;
      }
      if (!found) break;
    } else if (r.open("json")) {
      bool found;
      raw = std::string(r.until(marker(kClose, "json"), &found));
      if (!found) break;
    } else {
      bool found;
      r.until(marker(kClose, "call"), &found);  // skip anything unexpected up to the call close
      break;
    }
  }
  call.arguments = raw ? *raw : args.dump();
  out->tool_calls.push_back(std::move(call));
}

}  // namespace

ParsedAssistant parse_k3_assistant_output(std::string_view text, bool opened_think) {
  ParsedAssistant out;
  Reader r{text};
  bool found = true;
  if (opened_think) {
    out.reasoning_content = r.until(marker(kClose, "think"), &found);
    if (!found) return out;
    if (!r.open("response")) {
      // No response channel: treat the rest as content up to the message close.
      out.content = r.until(marker(kClose, "message"), &found);
      out.finished = found;
      return out;
    }
  }
  // Response text ends at its close, or (if the model skipped it) at the message close.
  const size_t close_resp = text.find(marker(kClose, "response"), r.pos);
  const size_t close_msg = text.find(marker(kClose, "message"), r.pos);
  if (close_resp != std::string_view::npos && (close_msg == std::string_view::npos || close_resp < close_msg)) {
    out.content = text.substr(r.pos, close_resp - r.pos);
    r.pos = close_resp + marker(kClose, "response").size();
  } else {
    const size_t end = close_msg == std::string_view::npos ? text.size() : close_msg;
    out.content = text.substr(r.pos, end - r.pos);
    r.pos = end;
  }
  if (r.open("tools")) {
    while (auto head = r.open("call")) parse_call(r, *head, &out);
    r.take(marker(kClose, "tools"));
  }
  if (r.take(marker(kClose, "message")) || text.find(kEndOfMsg, r.pos) != std::string_view::npos) out.finished = true;
  // A stray <|end_of_msg|> (generation usually stops before emitting it) is not content.
  if (!out.content.empty() && std::string_view(out.content).ends_with(kEndOfMsg))
    out.content.resize(out.content.size() - kEndOfMsg.size());
  return out;
}

}  // namespace pdserve::tokenizer
