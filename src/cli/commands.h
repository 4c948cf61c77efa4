// Each pdserve subcommand lives in its own file and registers itself here.
#pragma once

#include <CLI/CLI.hpp>

namespace pdserve::cli {

void add_make_model_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_router_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_print_launch_command(CLI::App& app);
void add_preflight_command(CLI::App& app);
void add_up_command(CLI::App& app);

}  // namespace pdserve::cli
