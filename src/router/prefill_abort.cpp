// PD: telling a prefill that the room it was given will never be claimed. Decode posts /abort
// itself when it refuses a room, but when decode cannot be reached at all only the router
// knows; without this post, prefill's half of the room waits out its --bootstrap-timeout
// holding an HTTP thread (docs/router.md, "When decode is unreachable").
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "pdserve/disagg/bootstrap_auth.h"
#include "router_impl.h"

namespace pdserve::router {

void RouterImpl::abort_prefill_room(const Worker& prefill, uint64_t room, const std::string& why) {
  prefill_aborts_total_++;
  const std::string host = prefill.addr().host;
  const int port = prefill.addr().bootstrap_port;
  const std::string body = Json{{"room", room}, {"reason", "router: " + why}}.dump();
  const auto timeout = std::chrono::duration<double>(cfg_.connect_timeout_s);
  // Off the request thread: the client's answer (a retry or an error) must not wait on it.
  pumps_.enqueue([host, port, body, room, timeout, secret = cfg_.cluster_secret] {
    httplib::Client cli(host, port);
    const auto t = std::chrono::duration_cast<std::chrono::microseconds>(timeout);
    cli.set_connection_timeout(t);
    cli.set_read_timeout(t);
    cli.set_write_timeout(t);
    httplib::Headers headers;
    for (auto& [k, v] : disagg::BootstrapAuth(secret).sign("POST", "/abort", body)) headers.emplace(k, v);
    auto res = cli.Post("/abort", headers, body, "application/json");
    if (!res)
      spdlog::warn("router: abort of room {} at prefill bootstrap {}:{} failed: {}", room, host, port,
                   httplib::to_string(res.error()));
    else if (res->status != 200)
      spdlog::warn("router: prefill bootstrap {}:{} answered {} to the abort of room {}{}", host, port, res->status,
                   room, res->status == 401 ? " (give the router the daemons' --cluster-secret-file)" : "");
  });
}

}  // namespace pdserve::router
