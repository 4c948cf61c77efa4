// The socket of the HTTP connection a handler is answering, found by its address pair.
// Why: Debian's cpp-httplib (0.11.4) gives a handler no socket and no "client gone" check, so
// a non-streaming request would run to max_tokens after its client left (a streaming one
// notices at its next write). Polling the socket for a hang-up lets the handler abort it.
#pragma once

#include <string>

namespace pdserve {

class ClientConnection {
 public:
  // Looks through this process's descriptors for the TCP socket whose local and peer
  // addresses are these (httplib's Request fields). Not found (unusual address formats,
  // /proc missing): gone() stays false, i.e. the old behaviour.
  static ClientConnection find(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

  bool found() const { return fd_ >= 0; }
  // True once the peer closed or reset the connection. Bytes it sent (a pipelined request)
  // do not count; only a hang-up does. The descriptor stays httplib's: we never read it.
  bool gone() const;

 private:
  int fd_ = -1;
};

}  // namespace pdserve
