// pdserve serve --model DIR [--host H] [--port P] ...: the unified engine behind the
// OpenAI-compatible API. Prints "pdserve: listening on http://H:P" once it accepts requests
// (with --port 0 that line is how a caller learns the port).
#include <signal.h>

#include <iostream>
#include <thread>

#include <spdlog/spdlog.h>

#include "commands.h"
#include "pdserve/server/http_server.h"
#include "topology_args.h"

namespace pdserve::cli {

namespace {

int run_serve(server::ServeConfig cfg) {
  if (Status st = cfg.validate(); !st.is_ok()) {
    std::cerr << "serve: " << st.message() << "\n";
    return 2;
  }
  // SIGINT / SIGTERM are handled by one thread (blocked everywhere else), which stops the server.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  auto srv = server::HttpServer::create(cfg);
  if (!srv.is_ok()) {
    std::cerr << "serve: " << srv.status().message() << "\n";
    return 1;
  }
  auto port = (*srv)->bind();
  if (!port.is_ok()) {
    std::cerr << "serve: " << port.status().message() << "\n";
    return 1;
  }
  server::HttpServer* s = srv->get();
  std::thread waiter([s, sigs] {
    int sig = 0;
    sigwait(&sigs, &sig);
    spdlog::info("signal {}: shutting down", sig);
    s->stop();
  });
  const auto& rc = s->engine().config();
  spdlog::info("model {} ({}): {} KV pages of {} tokens, {} KDA slots, max_model_len {}", cfg.model_dir,
               s->config().served_model_name, rc.num_pages, rc.page_size, rc.max_running, rc.max_model_len);
  std::cout << "pdserve: listening on http://" << cfg.host << ":" << *port << std::endl;
  s->run();
  // Wake the signal thread if we stopped for another reason.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  srv->reset();
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible API (prefill and decode in one process)");
  auto cfg = std::make_shared<server::ServeConfig>();
  auto config = std::make_shared<std::string>();
  cmd->add_option("--model", cfg->model_dir, "Model directory (or MODEL_PATH of --config)");
  add_config_option(cmd, config.get());
  cmd->add_option("--served-model-name", cfg->served_model_name, "Model name in the API (default: directory name)");
  cmd->add_option("--host", cfg->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", cfg->port, "Port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", cfg->api_key, "Require 'Authorization: Bearer KEY' on /v1/*");
  cmd->add_option("--page-size", cfg->runtime.page_size, "Tokens per KV page")->capture_default_str();
  cmd->add_option("--num-pages", cfg->runtime.num_pages, "KV pages (0: max_running full-length requests)")->capture_default_str();
  cmd->add_option("--max-running", cfg->runtime.max_running, "Requests running at once (= KDA slots)")->capture_default_str();
  cmd->add_option("--chunk-size", cfg->runtime.chunk_size, "Longest prefill chunk per request per step")->capture_default_str();
  cmd->add_option("--step-tokens", cfg->runtime.step_token_budget, "Tokens per forward step (0: chunk size)")->capture_default_str();
  cmd->add_option("--max-queue", cfg->runtime.max_queue, "Waiting requests before 503")->capture_default_str();
  cmd->add_option("--max-model-len", cfg->runtime.max_model_len, "Prompt + completion limit (0: the model's)")->capture_default_str();
  cmd->add_option("--max-body-bytes", cfg->max_body_bytes, "Largest request body")->capture_default_str();
  cmd->add_option("--http-threads", cfg->http_threads, "HTTP worker threads (0: auto)")->capture_default_str();
  cmd->callback([cfg, config, cmd]() {
    // serve is not a topology role: it takes the shared keys (model, host, page and chunk size).
    if (!config->empty())
      if (Status st = apply_topology_to_runtime(*cmd, *config, std::nullopt, {&cfg->model_dir, &cfg->host, nullptr, nullptr,
                                                                              nullptr, &cfg->runtime});
          !st.is_ok()) {
        std::cerr << "serve: " << st.message() << "\n";
        std::exit(2);
      }
    if (cfg->model_dir.empty()) {
      std::cerr << "serve: --model DIR (or --config FILE with MODEL_PATH) is required\n";
      std::exit(2);
    }
    std::exit(run_serve(*cfg));
  });
}

}  // namespace pdserve::cli
