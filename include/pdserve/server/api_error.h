// OpenAI-style errors: {"error": {"message", "type", "param", "code"}} and the one place
// that maps a Status to an HTTP code.
#pragma once

#include <string>

#include "pdserve/core/json_util.h"
#include "pdserve/core/status.h"

namespace pdserve::server {

struct ApiError {
  int http_status = 500;
  std::string message;
  std::string type;   // invalid_request_error, authentication_error, not_found_error, ...
  std::string param;  // the offending field, "" when none
  std::string code;   // machine-readable detail, "" when none

  Json to_json() const;
};

// THE mapping (docs/serving.md has the table). Messages from request parsing start with the
// field name ("temperature: must be >= 0"), which becomes `param`.
ApiError api_error_from_status(const Status& st);

// Errors that are not a Status: authentication, routing, body size.
ApiError unauthorized_error();
ApiError not_found_route(const std::string& path);
ApiError body_too_large(int64_t limit);

}  // namespace pdserve::server
