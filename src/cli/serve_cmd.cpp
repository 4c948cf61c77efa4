// pdserve serve --model DIR [--host H] [--port P] ...: the unified engine behind the
// OpenAI-compatible API. Prints "pdserve: listening on http://H:P" once it accepts requests
// (with --port 0 that line is how a caller learns the port).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include <spdlog/spdlog.h>

#include "commands.h"
#include "pdserve/server/http_server.h"
#include "pdserve/server/node_serving.h"
#include "topology_args.h"

namespace pdserve::cli {

int run_server(server::ServeConfig cfg) {
  const std::string who = server::server_role_name(cfg.role) == std::string("unified") ? "serve" : server::server_role_name(cfg.role);
  if (Status st = cfg.validate(); !st.is_ok()) {
    std::cerr << who << ": " << st.message() << "\n";
    return 2;
  }
  // Nodes 1..N-1 of an instance run no server: they follow node 0's steps until it stops.
  if (cfg.nnodes > 1 && cfg.node_rank > 0) return server::run_node_follower(cfg);
  // SIGINT / SIGTERM are handled by one thread (blocked everywhere else), which stops the server.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  // Until the server exists a signal ends the process at once: startup can take minutes
  // (loading weights; a multi-node leader waits --dist-timeout for its followers). Polling
  // leaves any later signal pending for the waiter below.
  std::atomic<bool> started{false};
  std::thread startup_watch([sigs, &started, who] {
    while (!started.load()) {
      timespec tick{0, 100'000'000};
      const int sig = sigtimedwait(&sigs, nullptr, &tick);
      if (sig > 0 && !started.load()) {
        std::cerr << who << ": signal " << sig << " during startup: exiting" << std::endl;
        std::_Exit(128 + sig);
      }
    }
  });
  auto srv = server::HttpServer::create(cfg);
  started.store(true);
  startup_watch.join();
  if (!srv.is_ok()) {
    std::cerr << who << ": " << srv.status().message() << "\n";
    return 1;
  }
  auto port = (*srv)->bind();
  if (!port.is_ok()) {
    std::cerr << who << ": " << port.status().message() << "\n";
    return 1;
  }
  server::HttpServer* s = srv->get();
  // The first signal drains: no new requests, in-flight ones get drain_timeout_s to finish.
  // A second signal exits at once. `done` tells the thread the server stopped on its own.
  std::atomic<bool> done{false};
  std::thread waiter([s, sigs, &done, drain_s = cfg.drain_timeout_s] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (done.load()) return;
    spdlog::info("signal {}: draining, {} request(s) in flight (up to {} s; a second signal exits at once)", sig,
                 s->in_flight(), drain_s);
    s->begin_drain();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(drain_s);
    while (s->in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
      timespec tick{0, 50'000'000};
      const int again = sigtimedwait(&sigs, nullptr, &tick);
      if (again > 0 && !done.load()) {
        spdlog::warn("signal {} while draining: exiting now", again);
        std::fflush(nullptr);
        std::_Exit(128 + again);
      }
    }
    if (s->in_flight() > 0) {
      spdlog::warn("drain timeout ({} s): aborting {} request(s) still in flight", drain_s, s->in_flight());
      s->abort_all();
    } else {
      spdlog::info("drained: no request in flight; stopping");
    }
    s->stop();
  });
  const auto& rc = s->engine().config();
  spdlog::info("{} role, model {} ({}), tp {}: {} KV pages of {} tokens ({}), {} KDA slots, max_model_len {}",
               server::server_role_name(cfg.role), cfg.model_dir, s->config().served_model_name, cfg.tp, rc.num_pages,
               rc.page_size, kv_cache_dtype_name(rc.kv_cache_dtype), rc.max_running, rc.max_model_len);
  if (s->prefill()) spdlog::info("bootstrap server on {}:{}", cfg.disagg.bootstrap_host, s->prefill()->bootstrap_port());
  if (s->decode()) spdlog::info("transfer listener on {}", s->decode()->info()["transfer_address"].get<std::string>());
  std::cout << "pdserve: listening on http://" << cfg.host << ":" << *port << std::endl;
  s->run();
  // Wake the signal thread if we stopped for another reason.
  done.store(true);
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  srv->reset();
  return 0;
}

CLI::Option* add_kv_cache_dtype_option(CLI::App* cmd, DType* out, const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          "--kv-cache-dtype",
          [out](const std::string& v) {
            if (Status st = runtime::parse_kv_cache_dtype(v, out); !st.is_ok()) throw CLI::ValidationError("--kv-cache-dtype", st.message());
          },
          help)
      ->default_str(kv_cache_dtype_name(*out));
}

void add_server_options(CLI::App* cmd, const std::shared_ptr<server::ServeConfig>& cfg, std::string* config_path) {
  cmd->add_option("--model", cfg->model_dir, "Model directory (or MODEL_PATH of --config)");
  add_config_option(cmd, config_path);
  cmd->add_option("--tp", cfg->tp, "Tensor-parallel ranks (threads; with --device cuda, rank r on GPU r)")->capture_default_str();
  cmd->add_option("--pp", cfg->pp, "Pipeline stages of --tp ranks each (prefill or unified role; --device cuda: one GPU a stage, --tp 1)")->capture_default_str();
  cmd->add_option("--device", cfg->device, "Backend: cpu or cuda (--tp GPUs)")->capture_default_str();
  cmd->add_option("--nnodes", cfg->nnodes, "Nodes this instance spans (--tp splits evenly over them, or with --pp whole stages: --pp / --nnodes a node; see docs/operations.md)")
      ->capture_default_str();
  cmd->add_option("--node-rank", cfg->node_rank, "This node's rank in the instance (0: the leader)")->capture_default_str();
  cmd->add_option("--dist-init-addr", cfg->dist_init_addr, "HOST:PORT where node 0 listens for the other nodes (--nnodes > 1)");
  cmd->add_option("--dist-timeout", cfg->dist_timeout_s, "--nnodes > 1: seconds the nodes wait for each other at startup")->capture_default_str();
  cmd->add_flag("!--no-cuda-graphs", cfg->cuda_graphs, "--device cuda: run decode steps eagerly instead of replaying CUDA graphs");
  cmd->add_flag("--bf16-mla-prefill", cfg->cuda_bf16_mla_prefill,
                "--device cuda: prefill attention on bf16 tensor cores (~280x faster at 8K chunks; logits move ~1e-3 from the fp32 path)");
  cmd->add_flag("--bf16-kda-prefill", cfg->cuda_bf16_kda_prefill,
                "--device cuda: chunked KDA prefill with bf16 matmul operands (fla's precision class, ~5e-3; off: 3xTF32, 1e-4 of the CPU)");
  cmd->add_flag("!--no-e4m3-moe-decode", cfg->cuda_e4m3_moe_decode,
                "--device cuda, decode role: MoE experts in the bf16 bit shuffle (default: E4M3 tensor cores where the layer fits, "
                "~1.1x faster at batch 4-256)");
  cmd->add_option("--served-model-name", cfg->served_model_name, "Model name in the API (default: directory name)");
  cmd->add_option("--host", cfg->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", cfg->port, "Port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", cfg->api_key, "Require 'Authorization: Bearer KEY' on /v1/*");
  cmd->add_option("--page-size", cfg->runtime.page_size, "Tokens per KV page")->capture_default_str();
  add_kv_cache_dtype_option(cmd, &cfg->runtime.kv_cache_dtype, "MLA latent cache dtype: float32 or bfloat16 (half the MLA cache memory and MLA transfer bytes; --device cpu or cuda; prefill and decode must match)");
  cmd->add_option("--num-pages", cfg->runtime.num_pages, "KV pages (0: max_running full-length requests)")->capture_default_str();
  cmd->add_option("--max-running", cfg->runtime.max_running, "Requests running at once (= KDA slots)")->capture_default_str();
  cmd->add_option("--chunk-size", cfg->runtime.chunk_size, "Longest prefill chunk per request per step")->capture_default_str();
  cmd->add_option("--step-tokens", cfg->runtime.step_token_budget, "Tokens per forward step (0: chunk size)")->capture_default_str();
  cmd->add_option("--max-queue", cfg->runtime.max_queue, "Waiting requests before 503")->capture_default_str();
  cmd->add_option("--max-model-len", cfg->runtime.max_model_len, "Prompt + completion limit (0: the model's)")->capture_default_str();
  cmd->add_option("--max-body-bytes", cfg->max_body_bytes, "Largest request body")->capture_default_str();
  cmd->add_option("--http-threads", cfg->http_threads, "HTTP worker threads (0: auto)")->capture_default_str();
  cmd->add_option("--max-prompt-tokens", cfg->max_prompt_tokens, "Longest prompt in tokens; past it 400 (0: max-model-len)")
      ->capture_default_str();
  cmd->add_option("--max-completion-tokens", cfg->max_completion_tokens,
                  "Largest max_tokens a request may ask for; past it 400 (0: max-model-len)")->capture_default_str();
  cmd->add_option("--request-timeout", cfg->runtime.request_timeout_s,
                  "Seconds a request may run before it is ended with 504 and its pages freed (0: never)")->capture_default_str();
  cmd->add_option("--drain-timeout", cfg->drain_timeout_s,
                  "On SIGTERM/SIGINT: seconds in-flight requests get to finish before they are aborted")->capture_default_str();
}

int run_server_with_config(const CLI::App& cmd, server::ServeConfig cfg, const std::string& config_path) {
  const char* who = cfg.role == server::ServerRole::kUnified ? "serve" : server::server_role_name(cfg.role);
  if (!config_path.empty()) {
    // serve is not a topology role: it takes only the shared keys (model, host, page and chunk size).
    std::optional<deploy::Role> role;
    RoleFields f{&cfg.model_dir, &cfg.host, nullptr, nullptr, nullptr, &cfg.runtime};
    if (cfg.role != server::ServerRole::kUnified) {
      role = cfg.role == server::ServerRole::kPrefill ? deploy::Role::kPrefill : deploy::Role::kDecode;
      f.port = &cfg.port;
      f.tp = &cfg.tp;
      f.pp = &cfg.pp;
      f.cluster_secret_file = &cfg.disagg.cluster_secret_file;
      f.rdma_nics = &cfg.disagg.rdma_nics;
      if (cfg.role == server::ServerRole::kPrefill) f.bootstrap_port = &cfg.disagg.bootstrap_port;
      if (cfg.role == server::ServerRole::kDecode) f.allowed_prefills = &cfg.disagg.allowed_prefills;
    }
    if (Status st = apply_topology_to_runtime(cmd, config_path, role, f); !st.is_ok()) {
      std::cerr << who << ": " << st.message() << "\n";
      return 2;
    }
  }
  if (cfg.model_dir.empty()) {
    std::cerr << who << ": --model DIR (or --config FILE with MODEL_PATH) is required\n";
    return 2;
  }
  return run_server(std::move(cfg));
}

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible API (prefill and decode in one process)");
  auto cfg = std::make_shared<server::ServeConfig>();
  auto config = std::make_shared<std::string>();
  add_server_options(cmd, cfg, config.get());
  cmd->add_option("--cluster-secret-file", cfg->disagg.cluster_secret_file,
                  "--nnodes > 1: the cluster secret (mode 600, the same on every node) that authenticates the nodes' control stream");
  cmd->callback([cfg, config, cmd]() { std::exit(run_server_with_config(*cmd, *cfg, *config)); });
}

}  // namespace pdserve::cli
