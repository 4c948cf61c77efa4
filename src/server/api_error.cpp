#include "pdserve/server/api_error.h"

#include <cctype>

namespace pdserve::server {

Json ApiError::to_json() const {
  Json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return Json{{"error", e}};
}

namespace {
// "temperature: must be >= 0" -> "temperature"; "messages[0].role: ..." -> "messages[0].role".
std::string leading_field(const std::string& msg) {
  size_t i = 0;
  while (i < msg.size() && (std::isalnum(static_cast<unsigned char>(msg[i])) || msg[i] == '_' || msg[i] == '.' ||
                            msg[i] == '[' || msg[i] == ']'))
    ++i;
  if (i == 0 || i >= msg.size() || (msg[i] != ':' && msg[i] != ' ')) return "";
  return msg.substr(0, i);
}
}  // namespace

ApiError api_error_from_status(const Status& st) {
  ApiError e;
  e.message = st.message();
  e.code = error_code_name(st.code());
  switch (st.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange:
    case ErrorCode::kUnsupported:
    case ErrorCode::kDataLoss:
      e.http_status = 400;
      e.type = "invalid_request_error";
      e.param = leading_field(st.message());
      if (st.message().find("context limit") != std::string::npos) e.code = "context_length_exceeded";
      break;
    case ErrorCode::kNotFound:
      e.http_status = 404;
      e.type = "not_found_error";
      break;
    case ErrorCode::kUnavailable:
    case ErrorCode::kResourceExhausted:
      // Overload: the waiting queue is full. Clients retry 503s with backoff.
      e.http_status = 503;
      e.type = "overloaded_error";
      e.code = "server_overloaded";
      break;
    case ErrorCode::kDeadlineExceeded:
      e.http_status = 504;
      e.type = "timeout_error";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

ApiError unauthorized_error() {
  return {401, "invalid or missing API key (expected 'Authorization: Bearer <key>')", "authentication_error", "",
          "invalid_api_key"};
}

ApiError not_found_route(const std::string& path) {
  return {404, "no route for " + path, "not_found_error", "", "not_found"};
}

ApiError body_too_large(int64_t limit) {
  return {413, "request body is larger than the limit of " + std::to_string(limit) + " bytes",
          "invalid_request_error", "", "body_too_large"};
}

}  // namespace pdserve::server
