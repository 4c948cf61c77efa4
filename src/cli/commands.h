// Each pdserve subcommand lives in its own file and registers itself here.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

#include "pdserve/server/serve_config.h"

namespace pdserve::cli {

void add_make_model_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_router_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_prefill_command(CLI::App& app);
void add_decode_command(CLI::App& app);
void add_print_launch_command(CLI::App& app);
void add_preflight_command(CLI::App& app);
void add_up_command(CLI::App& app);
void add_transfer_bench_command(CLI::App& app);
void add_dist_check_command(CLI::App& app);

// Shared by serve, prefill and decode (serve_cmd.cpp): the options every server takes
// (--config FILE included), and the run loop (apply the topology file, bind, print
// "pdserve: listening on ...", serve until SIGINT / SIGTERM).
void add_server_options(CLI::App* cmd, const std::shared_ptr<server::ServeConfig>& cfg, std::string* config_path);
int run_server_with_config(const CLI::App& cmd, server::ServeConfig cfg, const std::string& config_path);
int run_server(server::ServeConfig cfg);
// --kv-cache-dtype float32|bfloat16 into *out (serve, prefill, decode, up, generate); a bad
// value is a CLI error naming the flag.
CLI::Option* add_kv_cache_dtype_option(CLI::App* cmd, DType* out, const std::string& help);

}  // namespace pdserve::cli
