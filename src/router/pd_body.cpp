#include "pdserve/router/pd_body.h"

#include <cstdio>

#include "pdserve/router/policy.h"

namespace pdserve::router {

uint64_t new_bootstrap_room() {
  for (;;) {
    uint64_t r = random_u64() >> 1;  // 63 bits
    if (r != 0) return r;
  }
}

void add_bootstrap_fields(Json& body, const std::string& host, int port, uint64_t room) {
  body["bootstrap_host"] = host;
  body["bootstrap_port"] = port;
  body["bootstrap_room"] = room;
}

std::string new_request_id() {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "rtr-%016llx", static_cast<unsigned long long>(random_u64()));
  return buf;
}

bool acceptable_request_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (unsigned char c : id)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}

}  // namespace pdserve::router
