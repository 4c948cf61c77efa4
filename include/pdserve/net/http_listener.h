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
  // httplib's default options set SO_REUSEPORT, which lets a second server bind a port that
  // is already serving and silently share it. SO_REUSEADDR alone still allows a quick
  // restart (TIME_WAIT) but makes a busy port a bind error.
  HttpListener() {
    set_socket_options([](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
  }
  void raise_backlog(int n = kBacklog) { ::listen(svr_sock_, n); }
};

}  // namespace pdserve::net
