#include "pdserve/net/client_connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

namespace pdserve {

namespace {

// "ip:port" of a socket address in httplib's spelling (inet_ntop, IPv4-mapped kept as is).
bool same_endpoint(const sockaddr_storage& a, const std::string& addr, int port) {
  char text[INET6_ADDRSTRLEN] = {};
  int p = -1;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    p = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    p = ntohs(v6->sin6_port);
  } else {
    return false;
  }
  return p == port && addr == text;
}

}  // namespace

ClientConnection ClientConnection::find(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                        int remote_port) {
  ClientConnection c;
  if (local_port <= 0 || remote_port <= 0) return c;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return c;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, self{};
    socklen_t pl = sizeof peer, sl = sizeof self;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (!same_endpoint(peer, remote_addr, remote_port)) continue;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&self), &sl) != 0) continue;
    if (!same_endpoint(self, local_addr, local_port)) continue;
    c.fd_ = static_cast<int>(fd);
    break;
  }
  closedir(dir);
  return c;
}

bool ClientConnection::gone() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace pdserve
