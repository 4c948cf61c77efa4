// An httplib::Server whose listen backlog can be raised after bind. Debian's httplib listens
// with a backlog of 5, so a burst of client connects overflows it and some first requests
// die with a read error; listen() again on the bound socket raises it. Shared by every
// HTTP front end (server, router, roles).
#pragma once

#include <httplib.h>
#include <sys/socket.h>

namespace pdserve::net {

class HttpListener : public httplib::Server {
 public:
  static constexpr int kBacklog = 1024;
  void raise_backlog(int n = kBacklog) { ::listen(svr_sock_, n); }
};

}  // namespace pdserve::net
