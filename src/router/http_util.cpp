#include "http_util.h"

#include <algorithm>
#include <cctype>
#include <string_view>

#include "pdserve/core/json_util.h"

namespace pdserve::router {

namespace {
bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(x) == std::tolower(y); });
}
bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::any_of(names.begin(), names.end(), [&](std::string_view n) { return iequals(n, name); });
}
}  // namespace

const char* error_type_for(int status) {
  switch (status) {
    case 400: case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 503: return "overloaded_error";
    case 504: return "timeout_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

void set_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
               const std::string& code) {
  Json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code.empty() ? Json() : Json(code)}};
  res.status = status;
  res.set_content(Json{{"error", e}}.dump(), "application/json");
}

httplib::Headers forward_request_headers(const httplib::Headers& in) {
  httplib::Headers out;
  for (const auto& [k, v] : in) {
    // Accept-Encoding is dropped so workers answer uncompressed; the router relays bytes as-is.
    if (one_of(k, {"REMOTE_ADDR", "REMOTE_PORT", "LOCAL_ADDR", "LOCAL_PORT", "Host", "Content-Length", "Content-Type",
               "Transfer-Encoding", "Connection", "Keep-Alive", "Accept-Encoding", "Expect", "Upgrade", "TE",
               "Proxy-Connection", "X-Request-Id", "Authorization"}))
      continue;
    out.emplace(k, v);
  }
  return out;
}

void copy_response_headers(const httplib::Headers& in, httplib::Response& out) {
  for (const auto& [k, v] : in) {
    // Content-Type is set with the body; X-Request-Id is the router's own.
    if (one_of(k, {"Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Content-Type", "X-Request-Id"})) continue;
    out.headers.emplace(k, v);
  }
}

bool is_event_stream(const httplib::Headers& h) {
  auto it = h.find("Content-Type");
  return it != h.end() && it->second.rfind("text/event-stream", 0) == 0;
}

}  // namespace pdserve::router
