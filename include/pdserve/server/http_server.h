// `pdserve serve`: the OpenAI-compatible HTTP front end over one runtime::Engine.
// HTTP handler threads never touch the model or the pools; they submit to the engine and
// read their RequestHandle (which aborts the request if the handler gives up on it).
#pragma once

#include "pdserve/net/http_listener.h"

#include <memory>
#include <string>

#include "pdserve/core/status.h"
#include "pdserve/runtime/engine.h"
#include "pdserve/server/serve_config.h"

namespace httplib {
class Server;
}

namespace pdserve::server {

class HttpServer {
 public:
  // Loads the model and tokenizer, builds and starts the engine. Not listening yet.
  static Result<std::unique_ptr<HttpServer>> create(ServeConfig cfg);
  ~HttpServer();

  // Binds host:port (port 0: any free port) and returns the port.
  Result<int> bind();
  // Serves until stop(); blocking.
  void run();
  void stop();

  const ServeConfig& config() const { return cfg_; }
  runtime::Engine& engine() { return *engine_; }

 private:
  HttpServer() = default;
  void install_routes();

  ServeConfig cfg_;
  std::shared_ptr<const tokenizer::Tokenizer> tok_;
  std::unique_ptr<runtime::Engine> engine_;
  std::unique_ptr<net::HttpListener> http_;
};

}  // namespace pdserve::server
