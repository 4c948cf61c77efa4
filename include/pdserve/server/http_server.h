// `pdserve serve`: the OpenAI-compatible HTTP front end over one runtime::Engine.
// HTTP handler threads never touch the model or the pools; they submit to the engine and
// read their RequestHandle (which aborts the request if the handler gives up on it).
#pragma once

#include "pdserve/net/http_listener.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "pdserve/core/status.h"
#include "pdserve/disagg/decode_coordinator.h"
#include "pdserve/disagg/prefill_coordinator.h"
#include "pdserve/runtime/engine.h"
#include "pdserve/transfer/rdma/fabric.h"
#include "pdserve/transfer/rdma/nic_probe.h"
#include "pdserve/transfer/tcp_transport.h"
#include "pdserve/server/serve_config.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace pdserve::server {

struct DrainState;
class NodeLeader;  // node_serving.h

class HttpServer {
 public:
  // Builds the prefill / decode role's transport (tests wrap it in a fault injector).
  using TransportFactory = std::function<Result<std::unique_ptr<transfer::Transport>>(const transfer::TcpConfig&)>;
  // Builds the device forward of `--device cuda` (tests hand in a stand-in; default: make_cuda_forward).
  using DeviceFactory = std::function<Result<std::unique_ptr<DeviceForward>>(TpModelGroup&, const ServeConfig&)>;
  // The RDMA NICs as the prefill / decode roles see them when the transport policy may pick
  // rdma: the device list, the per-NIC probe, and opening them as a Fabric. Each left empty
  // is libibverbs (list_devices, probe_nics, make_verbs_fabric); tests hand in a fake fabric
  // with probe reports that say its NICs are up, and run the roles end to end over it.
  struct RdmaHooks {
    std::function<transfer::rdma::DeviceList()> list_devices;
    std::function<std::vector<transfer::rdma::PortReport>(const std::vector<transfer::rdma::NicName>&, int gid_index)> probe_nics;
    std::function<Result<std::unique_ptr<transfer::rdma::Fabric>>(const std::vector<transfer::rdma::NicName>&, int gid_index)> make_fabric;
  };
  // Loads the model and tokenizer, builds and starts the engine. Not listening yet.
  // make_transport builds the TCP transport only; the RDMA one comes from rdma's fabric.
  static Result<std::unique_ptr<HttpServer>> create(ServeConfig cfg, TransportFactory make_transport = {},
                                                    DeviceFactory make_device = {}, RdmaHooks rdma = {});
  ~HttpServer();

  // Binds host:port (port 0: any free port) and returns the port.
  Result<int> bind();
  // Serves until stop(); blocking.
  void run();
  void stop();

  // Graceful shutdown (SIGTERM): from begin_drain() on, new /v1/* requests and /health get
  // 503 "draining" while requests already in flight carry on. in_flight() counts generation
  // requests whose response has not been fully written. abort_all() ends what is left
  // (the engine finishes each with kAbort) so that stop() does not wait for it.
  void begin_drain();
  bool draining() const;
  int64_t in_flight() const;
  void abort_all();

  const ServeConfig& config() const { return cfg_; }
  runtime::Engine& engine() { return *engine_; }
  disagg::PrefillCoordinator* prefill() { return prefill_.get(); }  // prefill role only
  disagg::DecodeCoordinator* decode() { return decode_.get(); }     // decode role only

 private:
  HttpServer() = default;
  void install_routes();
  // Answers a /v1 (or /health_generate) request that this server refuses before any work:
  // draining, an instance that lost a node, a missing API key. True when it answered.
  bool refused(const httplib::Request& req, httplib::Response& res);

  ServeConfig cfg_;
  std::shared_ptr<const tokenizer::Tokenizer> tok_;
  std::unique_ptr<runtime::Engine> engine_;
  std::unique_ptr<disagg::PrefillCoordinator> prefill_;
  std::unique_ptr<disagg::DecodeCoordinator> decode_;
  std::unique_ptr<NodeLeader> nodes_;  // --nnodes > 1: the followers' control stream
  std::string transport_choice_;  // what the transport policy chose, and why
  Json transport_rdma_;           // the RDMA NICs the policy saw (devices, state, link layer, GID)
  std::unique_ptr<net::HttpListener> http_;
  std::atomic<bool> stop_requested_{false}, run_called_{false}, run_returned_{false};
  std::shared_ptr<DrainState> drain_;
};

}  // namespace pdserve::server
