// pdserve make-model --preset tiny-k3|tiny-k3-wide|tiny-kimi-linear|tiny-k3-mla512|tiny-k3-moe128 --out DIR [--seed N]
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <iostream>

#include "commands.h"
#include "pdserve/model/make_model.h"

namespace pdserve::cli {

void add_make_model_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("make-model", "Write a small deterministic model in the real checkpoint layout");
  struct Opts {
    std::string preset = "tiny-k3";
    std::string out;
    uint64_t seed = 1234;
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option("--preset", opts->preset, "tiny-k3 (every Kimi-K3 feature), tiny-k3-wide (4 heads, for TP tests), tiny-kimi-linear, tiny-k3-mla512 (K3's MLA cache widths at 3 heads) or tiny-k3-moe128 (routed experts 128 wide: the CUDA MoE decode layout)")
      ->check(CLI::IsMember(model_presets()));
  cmd->add_option("--out", opts->out, "Output directory (created if missing)")->required();
  cmd->add_option("--seed", opts->seed, "Seed of the weights");
  cmd->callback([opts]() {
    Status st = make_model(opts->preset, opts->out, opts->seed);
    if (!st.is_ok()) {
      std::cerr << "make-model: " << st.message() << "\n";
      std::exit(1);
    }
    std::cout << "wrote " << opts->preset << " to " << opts->out << "\n";
  });
}

}  // namespace pdserve::cli
