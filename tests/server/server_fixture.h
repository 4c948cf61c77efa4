// An in-process `pdserve serve` on a free port (port 0), on the tiny K3 model, plus small
// HTTP helpers. The server is stopped and joined in the destructor, whatever the test did.
#pragma once

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

#include "model/test_models.h"
#include "pdserve/core/json_util.h"
#include "pdserve/server/http_server.h"

namespace pdserve::server::testing {

inline ServeConfig tiny_config() {
  ServeConfig cfg;
  cfg.model_dir = pdserve::testing::tiny_model_dir("tiny-k3");
  cfg.served_model_name = "tiny-k3";
  cfg.port = 0;
  cfg.max_body_bytes = 64 * 1024;
  cfg.runtime.page_size = 16;
  cfg.runtime.max_model_len = 1024;
  cfg.runtime.chunk_size = 64;
  return cfg;
}

class LiveServer {
 public:
  explicit LiveServer(ServeConfig cfg = tiny_config(), HttpServer::TransportFactory make_transport = {},
                      HttpServer::DeviceFactory make_device = {}, HttpServer::RdmaHooks rdma = {}) {
    auto s = HttpServer::create(std::move(cfg), std::move(make_transport), std::move(make_device), std::move(rdma));
    if (!s.is_ok()) throw std::runtime_error(s.status().message());
    server_ = std::move(s).value();
    port_ = server_->bind().value();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~LiveServer() {
    if (!server_) return;
    server_->stop();
    thread_.join();
  }
  // Stops and destroys the server now (a killed process, as far as its peers can tell).
  void kill() {
    if (!server_) return;
    server_->stop();
    thread_.join();
    server_.reset();
  }
  int port() const { return port_; }
  HttpServer& server() { return *server_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120, 0);
    return c;
  }
  // POST a JSON body; returns {status, body}.
  std::pair<int, std::string> post(const std::string& path, const std::string& body,
                                   const httplib::Headers& headers = {}) const {
    auto c = client();
    auto r = c.Post(path.c_str(), headers, body, "application/json");
    if (!r) return {-1, ""};
    return {r->status, r->body};
  }
  std::pair<int, std::string> get(const std::string& path) const {
    auto c = client();
    auto r = c.Get(path.c_str());
    if (!r) return {-1, ""};
    return {r->status, r->body};
  }
  Json info() const { return Json::parse(get("/get_server_info").second); }
  // The value of an unlabelled (or exactly labelled) sample in /metrics; -1 when absent.
  double metric(const std::string& name) const {
    const std::string text = get("/metrics").second;
    size_t at = 0;
    while ((at = text.find(name + " ", at)) != std::string::npos) {
      if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + name.size() + 1));
      ++at;
    }
    return -1;
  }

 private:
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
};

// A raw HTTP/1.1 client for streaming requests that can vanish at will: open() sends the
// request and returns after the first SSE event; close() drops the connection.
class RawStream {
 public:
  ~RawStream() { close(); }
  // Sends the request and reads up to the first SSE event.
  bool open(int port, const std::string& path, const std::string& body) {
    if (!send_only(port, path, body)) return false;
    char buf[4096];
    while (got_.find("data: {") == std::string::npos) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return false;
      got_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  // Sends the request and returns at once, reading nothing (a non-streaming client that
  // will hang up before the answer).
  bool send_only(int port, const std::string& path, const std::string& body) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return false;
    const std::string req = "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" +
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    return ::send(fd_, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size());
  }
  // Reads until the server ends the stream ("[DONE]") or closes the connection.
  const std::string& read_to_end() {
    char buf[4096];
    while (fd_ >= 0 && got_.find("data: [DONE]") == std::string::npos) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      got_.append(buf, static_cast<size_t>(n));
    }
    return got_;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  const std::string& received() const { return got_; }

 private:
  int fd_ = -1;
  std::string got_;
};

// "data: {...}\n\n" events of an SSE body, in order ("[DONE]" included as a string).
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < body.size()) {
    size_t end = body.find("\n\n", at);
    if (end == std::string::npos) end = body.size();
    std::string ev = body.substr(at, end - at);
    if (ev.rfind("data: ", 0) == 0) out.push_back(ev.substr(6));
    else if (!ev.empty()) out.push_back("<malformed>" + ev);
    at = end + 2;
  }
  return out;
}

}  // namespace pdserve::server::testing
