// pdserve: one binary, a few roles. See docs/design.md.
#include <spdlog/spdlog.h>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"pdserve: a prefill/decode disaggregated engine for Kimi-K3-class models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pdserve 0.1.0");
  pdserve::cli::add_make_model_command(app);
  pdserve::cli::add_generate_command(app);
  pdserve::cli::add_tokenize_command(app);
  pdserve::cli::add_router_command(app);
  pdserve::cli::add_bench_command(app);
  pdserve::cli::add_serve_command(app);
  pdserve::cli::add_prefill_command(app);
  pdserve::cli::add_decode_command(app);
  pdserve::cli::add_print_launch_command(app);
  pdserve::cli::add_preflight_command(app);
  pdserve::cli::add_up_command(app);
  pdserve::cli::add_transfer_bench_command(app);
  pdserve::cli::add_dist_check_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
