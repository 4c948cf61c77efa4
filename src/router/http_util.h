// Small HTTP helpers shared by the router's handlers: OpenAI-style errors, header relay.
#pragma once

#include <httplib.h>

#include <string>

namespace pdserve::router {

// {"error": {"message", "type", "param": null, "code"}} with the given HTTP status.
void set_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
               const std::string& code);
// The OpenAI "type" for a status the router itself produces.
const char* error_type_for(int status);

// Client request headers a worker should see (Authorization, Accept, ...); hop-by-hop and
// httplib's own bookkeeping headers (REMOTE_ADDR, ...) are dropped.
httplib::Headers forward_request_headers(const httplib::Headers& in);
// Copies a worker's response headers to the client's response, minus hop-by-hop ones and
// those httplib sets itself (Content-Length, Transfer-Encoding).
void copy_response_headers(const httplib::Headers& in, httplib::Response& out);

bool is_event_stream(const httplib::Headers& h);

}  // namespace pdserve::router
