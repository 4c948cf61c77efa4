// A prefill + decode pair on free ports over the TCP transport (optionally wrapped in the
// fault injector), and the router's job done by hand: the same body, with bootstrap fields,
// sent to both at once.
#pragma once

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include "model/test_models.h"
#include "pdserve/transfer/fault_transport.h"
#include "server/child_server.h"
#include "server/server_fixture.h"

namespace pdserve::server::testing {

inline ServeConfig pd_config(ServerRole role, int tp) {
  ServeConfig cfg;
  cfg.role = role;
  cfg.tp = tp;
  cfg.model_dir = pdserve::testing::tiny_model_dir("tiny-k3-wide");
  cfg.served_model_name = "tiny";
  cfg.port = 0;
  cfg.runtime.page_size = 16;
  cfg.runtime.chunk_size = 32;
  cfg.runtime.max_model_len = 512;
  cfg.runtime.max_running = 4;
  cfg.disagg.bootstrap_port = 0;
  cfg.disagg.transfer_port = 0;
  cfg.disagg.transfer_streams = 2;
  return cfg;
}

struct PdResult {
  int prefill_status = 0, decode_status = 0;
  std::string prefill_body, decode_body;
};

// Wraps the role's TCP transport in a fault injector the test can steer.
struct FaultHook {
  transfer::FaultInjectingTransport* fault = nullptr;
  HttpServer::TransportFactory factory() {
    return [this](const transfer::TcpConfig& c) -> Result<std::unique_ptr<transfer::Transport>> {
      PDS_ASSIGN_OR_RETURN(auto inner, transfer::make_tcp_transport(c));
      auto f = std::make_unique<transfer::FaultInjectingTransport>(std::move(inner));
      fault = f.get();
      return std::unique_ptr<transfer::Transport>(std::move(f));
    };
  }
};

struct PdPair {
  std::unique_ptr<LiveServer> prefill, decode;
  PdPair(int ptp, int dtp, ServeConfig pc = {}, ServeConfig dc = {}, HttpServer::TransportFactory pf = {},
         HttpServer::TransportFactory df = {}) {
    if (pc.model_dir.empty()) pc = pd_config(ServerRole::kPrefill, ptp);
    if (dc.model_dir.empty()) dc = pd_config(ServerRole::kDecode, dtp);
    prefill = std::make_unique<LiveServer>(pc, std::move(pf));
    decode = std::make_unique<LiveServer>(dc, std::move(df));
  }
  int bootstrap_port() const { return prefill->server().prefill()->bootstrap_port(); }
  Json with_bootstrap(Json body, uint64_t room) const {
    body["bootstrap_host"] = "127.0.0.1";
    body["bootstrap_port"] = bootstrap_port();
    body["bootstrap_room"] = room;
    return body;
  }
  // Both at once, as the router does; waits for both answers.
  PdResult request(const std::string& path, const Json& body, uint64_t room) const {
    const std::string b = with_bootstrap(body, room).dump();
    auto p = std::async(std::launch::async, [&] { return prefill->post(path, b); });
    auto d = decode->post(path, b);
    auto pr = p.get();
    return {pr.first, d.first, pr.second, d.second};
  }
  // Pages and slots go back right after the last event; give the engines a moment.
  static bool pools_free(LiveServer& s) {
    for (int i = 0; i < 500; ++i) {
      auto st = s.server().engine().stats();
      if (st.pages_used == 0 && st.slots_used == 0 && st.running == 0 && st.waiting == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  void expect_pools_free() const {
    if (prefill) {
      EXPECT_TRUE(pools_free(*prefill)) << "prefill still holds pages or slots";
    }
    if (decode) {
      EXPECT_TRUE(pools_free(*decode)) << "decode still holds pages or slots";
    }
  }
};

}  // namespace pdserve::server::testing
