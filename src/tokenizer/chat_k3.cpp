// The Kimi-K3 framing. One idea per function, mirroring the reference's structure so a
// change there maps to one place here:
//   <|open|>tag attr="v"<|sep|> ... <|close|>tag<|sep|>, messages end with <|end_of_msg|>.
// Control tokens are their own segments; tag names, attribute text and values are separate
// text segments (the reference encodes each one on its own, which fixes BPE boundaries).
#include "pdserve/tokenizer/chat_k3.h"

#include <algorithm>

#include "pdserve/tokenizer/special_tokens.h"
#include "pdserve/tokenizer/utf8.h"

namespace pdserve::tokenizer {
namespace {

using Segs = std::vector<ChatSegment>;
using J = OrderedJson;

Status bad(const std::string& where, const std::string& what) { return invalid_argument(where + ": " + what); }

void text(Segs& s, std::string_view t) {
  if (!t.empty()) s.push_back({std::string(t), false});
}
void control(Segs& s, std::string_view t) { s.push_back({std::string(t), true}); }

std::string escape_attr(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

using Attrs = std::vector<std::pair<std::string, std::string>>;

void open_tag(Segs& s, std::string_view tag, const Attrs& attrs = {}) {
  control(s, kOpen);
  text(s, tag);
  for (const auto& [k, v] : attrs) {
    text(s, " " + k);
    text(s, "=\"");
    text(s, escape_attr(v));
    text(s, "\"");
  }
  control(s, kSep);
}

void close_tag(Segs& s, std::string_view tag) {
  control(s, kClose);
  text(s, tag);
  control(s, kSep);
}

void end_message(Segs& s, std::string_view tag = "message") {
  close_tag(s, tag);
  control(s, kEndOfMsg);
}

// ---- JSON as Python's json.dumps writes it (ensure_ascii=False) ----

void py_escape(std::string_view s, std::string* out) {
  static const char* hex = "0123456789abcdef";
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          *out += "\\u00";
          *out += hex[c >> 4];
          *out += hex[c & 15];
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

// compact: separators (",", ":") as _json_compact; else json.dumps' default (", ", ": ").
// sort_keys: deep_sort_dict (byte order of UTF-8 equals code point order).
void py_dump(const J& v, bool compact, bool sort_keys, std::string* out) {
  switch (v.type()) {
    case J::value_t::object: {
      std::vector<const std::string*> keys;
      for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(&it.key());
      if (sort_keys) std::sort(keys.begin(), keys.end(), [](auto* a, auto* b) { return *a < *b; });
      *out += '{';
      for (size_t i = 0; i < keys.size(); ++i) {
        if (i) *out += compact ? "," : ", ";
        py_escape(*keys[i], out);
        *out += compact ? ":" : ": ";
        py_dump(v.at(*keys[i]), compact, sort_keys, out);
      }
      *out += '}';
      return;
    }
    case J::value_t::array:
      *out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) *out += compact ? "," : ", ";
        py_dump(v[i], compact, sort_keys, out);
      }
      *out += ']';
      return;
    case J::value_t::string:
      py_escape(v.get_ref<const std::string&>(), out);
      return;
    default:  // numbers, booleans, null: nlohmann prints these as Python does (shortest repr)
      *out += v.dump();
  }
}

std::string py_dumps(const J& v, bool compact, bool sort_keys) {
  std::string out;
  py_dump(v, compact, sort_keys, &out);
  return out;
}

// str(value) for the scalar ids and names the reference interpolates.
std::string py_str(const J& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_null()) return "None";
  return v.dump();
}

bool truthy_string(const J& m, const char* key) {
  auto it = m.find(key);
  return it != m.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

bool strip_empty(std::string_view s) {
  for (size_t i = 0; i < s.size();)
    if (!utf8::is_python_space(utf8::next_code_point(s, &i))) return false;
  return true;
}

// ---- pieces of the conversation ----

Status render_content(Segs& s, const J& content, const std::string& where) {
  if (content.is_null()) return Status::ok();
  if (content.is_string()) {
    text(s, content.get_ref<const std::string&>());
    return Status::ok();
  }
  if (!content.is_array()) return bad(where, "content must be a string, an array of parts, or null");
  for (size_t i = 0; i < content.size(); ++i) {
    const J& part = content[i];
    const std::string pw = where + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return bad(pw, "a content part must be an object with a string 'type'");
    const std::string& type = part["type"].get_ref<const std::string&>();
    if (type == "image" || type == "image_url" || type == "input_image")
      return bad(pw, "image content is not supported by this server yet");
    if (!part.contains("text") || !part["text"].is_string()) return bad(pw, "content part of type '" + type + "' needs a string 'text'");
    text(s, part["text"].get_ref<const std::string&>());
  }
  return Status::ok();
}

void internal_system_message(Segs& s, std::string_view type, std::string_view body) {
  open_tag(s, "message", {{"role", "system"}, {"type", std::string(type)}});
  text(s, body);
  end_message(s);
}

void render_tool_declare(Segs& s, const J& tools, bool dynamic) {
  const std::string spec = py_dumps(tools, /*compact=*/true, /*sort_keys=*/true);
  std::string body = dynamic ? "## New Tools Available\n"
                               "The system dynamically extends the toolset via lazy-loading.\n"
                               "You have access to all existing and extended tools.\n"
                               "Here are the specs for the extended tools.\n\n```json\n" + spec + "\n```"
                             : "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n" + spec + "\n```";
  open_tag(s, "message", {{"role", "system"}, {"type", "tool-declare"}});
  text(s, body);
  end_message(s);
}

const char* xtml_type(const J& v) {
  switch (v.type()) {
    case J::value_t::boolean: return "boolean";
    case J::value_t::null: return "null";
    case J::value_t::number_integer:
    case J::value_t::number_unsigned:
    case J::value_t::number_float: return "number";
    case J::value_t::string: return "string";
    case J::value_t::object: return "object";
    default: return "array";
  }
}

// normalize_tool_arguments: object as is; JSON text parsed (an unparsable one is kept as a
// raw json block); empty -> {}.
struct Arguments {
  J object = J::object();
  std::optional<std::string> json_block;
};

Result<Arguments> normalize_arguments(const J* args, const std::string& where) {
  Arguments out;
  if (!args || args->is_null()) return out;
  if (args->is_object()) {
    out.object = *args;
    return out;
  }
  if (!args->is_string()) return bad(where, "arguments must be an object or a JSON object string");
  const std::string& str = args->get_ref<const std::string&>();
  if (strip_empty(str)) return out;
  J parsed = J::parse(str, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    out.json_block = str;
    return out;
  }
  if (!parsed.is_object()) return bad(where, "arguments must decode to a JSON object");
  out.object = std::move(parsed);
  return out;
}

Status render_tool_calls(Segs& s, const J& calls, const std::string& where) {
  if (!calls.is_array()) return bad(where, "tool_calls must be an array");
  open_tag(s, "tools");
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string cw = where + "[" + std::to_string(i) + "]";
    const J& call = calls[i];
    if (!call.is_object()) return bad(cw, "a tool call must be an object");
    const J& fn = call.contains("function") ? call["function"] : call;
    if (!fn.is_object()) return bad(cw, "function must be an object");
    if (!fn.contains("name") || !fn["name"].is_string()) return bad(cw, "function.name must be a string");
    const J* raw_args = fn.contains("arguments") ? &fn["arguments"] : nullptr;
    PDS_ASSIGN_OR_RETURN(Arguments args, normalize_arguments(raw_args, cw + ".function.arguments"));
    open_tag(s, "call", {{"tool", fn["name"].get<std::string>()}, {"index", std::to_string(i + 1)}});
    if (args.json_block) {
      open_tag(s, "json", {{"type", "object"}});
      text(s, *args.json_block);
      close_tag(s, "json");
    } else {
      for (auto it = args.object.begin(); it != args.object.end(); ++it) {
        open_tag(s, "argument", {{"key", it.key()}, {"type", xtml_type(it.value())}});
        text(s, it.value().is_string() ? it.value().get<std::string>() : py_dumps(it.value(), false, false));
        close_tag(s, "argument");
      }
    }
    close_tag(s, "call");
  }
  close_tag(s, "tools");
  return Status::ok();
}

Status render_assistant(Segs& s, const J& m, bool thinking, const std::string& where) {
  if (thinking) {
    // The think channel is structural: always present in thinking mode, filled when non-blank.
    const J* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "reasoning"}) {
      if (m.contains(key) && m[key].is_string() && !m[key].get_ref<const std::string&>().empty()) {
        reasoning = &m[key];
        break;
      }
      if (m.contains(key) && !m[key].is_null() && !m[key].is_string()) return bad(where + "." + key, "must be a string");
    }
    open_tag(s, "think");
    if (reasoning && !strip_empty(reasoning->get_ref<const std::string&>())) text(s, reasoning->get_ref<const std::string&>());
    close_tag(s, "think");
  }
  open_tag(s, "response");
  PDS_RETURN_IF_ERROR(render_content(s, m.contains("content") ? m["content"] : J(), where + ".content"));
  close_tag(s, "response");
  if (m.contains("tool_calls") && !m["tool_calls"].is_null() && !m["tool_calls"].empty())
    PDS_RETURN_IF_ERROR(render_tool_calls(s, m["tool_calls"], where + ".tool_calls"));
  return Status::ok();
}

std::optional<std::string> call_id_of(const J& v) {
  if (v.is_null()) return std::nullopt;
  return py_str(v);
}

// normalize_xtml_tool_result_messages: a run of tool messages whose tool_call_ids all match the
// last assistant's tool_calls is put in call order, and each takes its call's function name.
J reorder_tool_results(const J& messages) {
  J out = J::array();
  std::vector<std::pair<std::string, std::pair<size_t, J>>> index;  // id -> (position, name)
  auto lookup = [&](const std::string& id) -> const std::pair<size_t, J>* {
    for (auto& e : index)
      if (e.first == id) return &e.second;
    return nullptr;
  };
  size_t i = 0;
  while (i < messages.size()) {
    const J& m = messages[i];
    const bool is_obj = m.is_object() && m.contains("role");
    if (is_obj && m["role"] == "assistant") {
      index.clear();
      if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
        size_t pos = 0;
        for (const J& tc : m["tool_calls"]) {
          ++pos;
          if (!tc.is_object() || !tc.contains("id")) continue;
          auto id = call_id_of(tc["id"]);
          if (!id || lookup(*id)) continue;
          J name = tc.contains("function") && tc["function"].is_object() ? tc["function"].value("name", J()) : tc.value("name", J());
          index.push_back({*id, {pos, name}});
        }
      }
      out.push_back(m);
      ++i;
      continue;
    }
    if (!(is_obj && m["role"] == "tool")) {
      out.push_back(m);
      ++i;
      continue;
    }
    struct Item { size_t pos, offset; const J* msg; const J* name; };
    std::vector<Item> run;
    bool unresolved = false;
    for (size_t off = 0; i < messages.size() && messages[i].is_object() && messages[i].value("role", J()) == "tool"; ++i, ++off) {
      const J& t = messages[i];
      std::optional<std::string> id = t.contains("tool_call_id") ? call_id_of(t["tool_call_id"])
                                      : t.contains("id")         ? call_id_of(t["id"])
                                                                 : std::nullopt;
      const auto* hit = id ? lookup(*id) : nullptr;
      if (!hit) unresolved = true;
      run.push_back({hit ? hit->first : 0, off, &t, hit ? &hit->second : nullptr});
    }
    if (!unresolved)
      std::stable_sort(run.begin(), run.end(), [](const Item& a, const Item& b) { return a.pos < b.pos; });
    for (const Item& it : run) {
      J t = *it.msg;
      if (!unresolved && it.name && !it.name->is_null()) {
        t["tool"] = *it.name;
        if (t.contains("name")) t["name"] = *it.name;
      }
      out.push_back(std::move(t));
    }
  }
  return out;
}

}  // namespace

Result<std::vector<ChatSegment>> render_k3_chat(const OrderedJson& messages_in, const OrderedJson& tools,
                                                const ChatOptions& opts) {
  if (!messages_in.is_array()) return invalid_argument("messages must be an array");
  Segs s;
  if (!tools.is_null() && !tools.is_array()) return invalid_argument("tools must be an array");
  if (tools.is_array() && !tools.empty()) render_tool_declare(s, tools, /*dynamic=*/false);

  if (opts.thinking && opts.thinking_effort) {
    const std::string& e = *opts.thinking_effort;
    if (e != "low" && e != "medium" && e != "high" && e != "max")
      return invalid_argument("unsupported thinking_effort '" + e + "'; supported: low, medium, high, max");
    internal_system_message(s, "thinking-effort",
                            "`thinking_effort` guides on how much to think in your thinking channel (not including the "
                            "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
                            "Now the system is invoked with `thinking_effort=" + e + "`.");
  }

  const J messages = reorder_tool_results(messages_in);
  const J* tool_calls = nullptr;  // of the last assistant message, for tool-name fallback
  size_t tool_index = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const J& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad(where, "must be an object");
    if (!m.contains("role") || !m["role"].is_string()) return bad(where, "needs a string 'role'");
    const std::string& role = m["role"].get_ref<const std::string&>();
    if (m.contains("name") && !m["name"].is_null() && !m["name"].is_string()) return bad(where + ".name", "must be a string");
    const J content = m.contains("content") ? m["content"] : J();
    if (role == "user" || (role == "system" && !(m.contains("tools") && m["tools"].is_array() && !m["tools"].empty()))) {
      Attrs attrs{{"role", role}};
      if (truthy_string(m, "name")) attrs.push_back({"name", m["name"].get<std::string>()});
      open_tag(s, "message", attrs);
      PDS_RETURN_IF_ERROR(render_content(s, content, where + ".content"));
      end_message(s);
    } else if (role == "system") {
      render_tool_declare(s, m["tools"], /*dynamic=*/true);
    } else if (role == "tool") {
      ++tool_index;
      J name = m.contains("tool") ? m["tool"] : m.value("name", J());
      if (name.is_null() && tool_calls && tool_index <= tool_calls->size()) {
        const J& tc = (*tool_calls)[tool_index - 1];
        const J& fn = tc.is_object() && tc.contains("function") ? tc["function"] : tc;
        if (fn.is_object() && fn.contains("name")) name = fn["name"];
      }
      if (name.is_null())
        return bad(where, "tool message needs a resolvable tool name: set 'name', or answer a preceding assistant "
                          "tool_call (by tool_call_id or by order)");
      open_tag(s, "message", {{"role", "tool"}, {"tool", py_str(name)}, {"index", std::to_string(tool_index)}});
      PDS_RETURN_IF_ERROR(render_content(s, content, where + ".content"));
      end_message(s);
    } else if (role == "assistant") {
      tool_calls = m.contains("tool_calls") && m["tool_calls"].is_array() ? &m["tool_calls"] : nullptr;
      tool_index = 0;
      Attrs attrs{{"role", "assistant"}};
      if (truthy_string(m, "name")) attrs.push_back({"name", m["name"].get<std::string>()});
      open_tag(s, "message", attrs);
      PDS_RETURN_IF_ERROR(render_assistant(s, m, opts.thinking, where));
      end_message(s);
    } else {
      return bad(where, "unknown role '" + role + "' (expected system, user, assistant or tool)");
    }
  }

  if (opts.tool_choice == "required") {
    internal_system_message(s, "tool-choice", "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.");
  } else if (opts.tool_choice == "none") {
    internal_system_message(s, "tool-choice", "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.");
  }

  const J& rf = opts.response_format;
  const J rf_type = rf.is_object() ? rf.value("type", rf) : rf;
  static constexpr std::string_view kRawJson =
      "Your response must be raw JSON data without markdown code blocks (```json) or any additional formatting.";
  if (rf_type == "json_object") {
    internal_system_message(s, "response-format", "The system is invoked with `response_format=json_object`.\n" + std::string(kRawJson));
  } else if (rf_type == "json_schema") {
    J schema;  // extract_response_schema
    if (rf.is_object() && rf.contains("json_schema") && !rf["json_schema"].is_null()) {
      const J& js = rf["json_schema"];
      schema = js.is_object() ? (js.contains("schema") ? js["schema"] : js.contains("json_schema") ? js["json_schema"] : js) : js;
    }
    internal_system_message(s, "response-format",
                            "The system is invoked with `response_format=json_schema`.\n" + std::string(kRawJson) +
                                "\nThe JSON data must match the following schema:\n```json\n" + py_dumps(schema, true, true) + "\n```");
  }

  if (opts.add_generation_prompt) {
    open_tag(s, "message", {{"role", "assistant"}});
    open_tag(s, opts.thinking ? "think" : "response");
  }
  return s;
}

std::string join_segments(const std::vector<ChatSegment>& segments) {
  std::string out;
  for (const auto& seg : segments) out += seg.text;
  return out;
}

std::vector<TokenId> encode_segments(const Tokenizer& tok, const std::vector<ChatSegment>& segments) {
  std::vector<TokenId> ids;
  for (const auto& seg : segments) tok.encode_append(seg.text, seg.allow_special, &ids);
  return ids;
}

Result<std::vector<TokenId>> encode_k3_chat(const Tokenizer& tok, const OrderedJson& messages, const OrderedJson& tools,
                                            const ChatOptions& opts) {
  PDS_ASSIGN_OR_RETURN(auto segments, render_k3_chat(messages, tools, opts));
  return encode_segments(tok, segments);
}

}  // namespace pdserve::tokenizer
