// pdserve prefill / pdserve decode: the two halves of a disaggregated deployment. They take
// every `serve` option plus the disaggregation settings, and answer the same HTTP API; a
// request reaches them (through `pdserve router --pd`) with bootstrap_host/port/room.
#include "commands.h"
#include "topology_args.h"

namespace pdserve::cli {

namespace {

void add_disagg_options(CLI::App* cmd, const std::shared_ptr<server::ServeConfig>& cfg) {
  disagg::DisaggConfig& d = cfg->disagg;
  cmd->add_option("--transfer-streams", d.transfer_streams, "TCP connections per transfer peer")->capture_default_str();
  cmd->add_option("--heartbeat-interval", d.heartbeat_interval_s, "Seconds between decode's heartbeats to prefill")->capture_default_str();
  cmd->add_option("--heartbeat-misses", d.heartbeat_misses, "Missed heartbeats before a prefill's rooms fail")->capture_default_str();
  cmd->add_option("--transfer-backend", d.transfer_backend, "tcp, rdma (never falls back) or auto (says what it chose)")
      ->capture_default_str();
  cmd->add_option("--rdma-nics", d.rdma_nics, "RDMA NICs for the transfer (mlx5_0,mlx5_1 or mlx5_0:2; see docs/operations.md)")
      ->delimiter(',');
  cmd->add_option("--rdma-gid-index", d.rdma_gid_index, "GID index on every RDMA NIC (-1: prefer RoCE v2 IPv4-mapped)")
      ->capture_default_str();
  cmd->add_option("--cluster-secret-file", d.cluster_secret_file,
                  "File holding the shared secret that authenticates bootstrap requests and transfer connections "
                  "(mode 600; the same on every prefill and decode; unset: no authentication)");
  cmd->add_flag("!--no-transfer-checksum", d.checksum,
                "Do not hash transferred pages and state (both sides must agree; see docs/disaggregation.md)");
}

}  // namespace

void add_prefill_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("prefill", "Prefill role: fold prompts in and send the KV to decode servers");
  auto cfg = std::make_shared<server::ServeConfig>();
  cfg->role = server::ServerRole::kPrefill;
  auto config = std::make_shared<std::string>();
  add_server_options(cmd, cfg, config.get());
  add_disagg_options(cmd, cfg);
  cmd->add_option("--bootstrap-host", cfg->disagg.bootstrap_host, "Address of the bootstrap server")->capture_default_str();
  cmd->add_option("--bootstrap-port", cfg->disagg.bootstrap_port, "Bootstrap server port (0: any free port)")->capture_default_str();
  cmd->add_option("--bootstrap-timeout", cfg->disagg.bootstrap_timeout_s, "Seconds to wait for decode's target")->capture_default_str();
  cmd->callback([cfg, config, cmd]() { std::exit(run_server_with_config(*cmd, *cfg, *config)); });
}

void add_decode_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("decode", "Decode role: receive the KV from prefill servers and generate");
  auto cfg = std::make_shared<server::ServeConfig>();
  cfg->role = server::ServerRole::kDecode;
  auto config = std::make_shared<std::string>();
  add_server_options(cmd, cfg, config.get());
  add_disagg_options(cmd, cfg);
  cmd->add_option("--transfer-host", cfg->disagg.transfer_host, "Address prefill servers reach the transfer listener at")->capture_default_str();
  cmd->add_option("--transfer-port", cfg->disagg.transfer_port, "Transfer listener port (0: any free port)")->capture_default_str();
  cmd->add_option("--waiting-timeout", cfg->disagg.waiting_timeout_s, "Seconds to wait for a request's KV")->capture_default_str();
  cmd->add_option("--prefill-peer", cfg->disagg.prefill_peers,
                  "HOST:BOOTSTRAP_PORT of a prefill server to handshake and self-test before /health is ok (repeatable)");
  cmd->add_option("--allow-prefill", cfg->disagg.allowed_prefills,
                  "HOST:BOOTSTRAP_PORT of the only prefill servers whose rooms are accepted, as the router names them "
                  "(repeatable; none: any)");
  cmd->callback([cfg, config, cmd]() { std::exit(run_server_with_config(*cmd, *cfg, *config)); });
}

}  // namespace pdserve::cli
