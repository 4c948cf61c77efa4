// What the router adds to a request in PD mode, kept pure so tests can check it directly.
#pragma once

#include <cstdint>
#include <string>

#include "pdserve/core/json_util.h"

namespace pdserve::router {

// A random room id in [1, 2^63 - 1]: nonzero (0 reads as "no room") and fits a signed int64.
uint64_t new_bootstrap_room();

// Sets bootstrap_host, bootstrap_port and bootstrap_room on a request object (overwriting any
// the client sent: the router owns the pairing). `body` must be a JSON object.
void add_bootstrap_fields(Json& body, const std::string& host, int port, uint64_t room);

// "rtr-" + 16 hex digits; used when the client sent no X-Request-Id.
std::string new_request_id();

// A client-supplied X-Request-Id is kept when it is 1..128 printable ASCII characters.
bool acceptable_request_id(const std::string& id);

}  // namespace pdserve::router
