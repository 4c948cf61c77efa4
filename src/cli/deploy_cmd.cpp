// pdserve print-launch --config FILE --role R: the command of every process of a role, one
//   line each: NODE_INDEX <tab> NODE <tab> URL or - <tab> ENV or - <tab> ARGS (shell-quoted,
//   without the executable). scripts/deploy_pd.sh reads it.
// pdserve preflight --config FILE [--node NAME]... [--all-nodes]: this node's checks
//   (include/pdserve/deploy/preflight.h); one line per problem, exit 1 when any.
#include <iostream>

#include "commands.h"
#include "pdserve/deploy/preflight.h"
#include "pdserve/deploy/topology.h"

namespace pdserve::cli {
namespace {

int print_launch(const std::string& config, const std::string& role_s) {
  auto role = deploy::parse_role(role_s);
  auto t = role.is_ok() ? deploy::load_topology(config) : Result<deploy::Topology>(role.status());
  auto specs = t.is_ok() ? deploy::launch_specs(*t, *role) : Result<std::vector<deploy::LaunchSpec>>(t.status());
  if (!specs.is_ok()) {
    std::cerr << "print-launch: " << specs.status().message() << "\n";
    return 2;
  }
  for (const auto& s : *specs)
    std::cout << s.node_index << '\t' << s.node << '\t' << (s.url.empty() ? "-" : s.url) << '\t'
              << (s.env.empty() ? "-" : deploy::shell_join(s.env)) << '\t' << deploy::shell_join(s.args) << '\n';
  return 0;
}

int preflight(const std::string& config, const deploy::PreflightOptions& opt) {
  auto t = deploy::load_topology_fields(config);
  if (!t.is_ok()) {
    std::cout << "preflight: " << t.status().message() << std::endl;
    return 1;
  }
  deploy::PreflightReport r = deploy::run_preflight(*t, opt);
  // "note:" marks lines that are not problems (scripts/deploy_pd.sh counts the others).
  for (const auto& n : r.notes) std::cout << "preflight: note: " << n << "\n";
  for (const auto& p : r.problems) std::cout << "preflight: " << p << "\n";
  if (r.problems.empty()) std::cout << "preflight: " << r.checks << " checks passed\n";
  std::cout.flush();
  return r.problems.empty() ? 0 : 1;
}

}  // namespace

void add_print_launch_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("print-launch", "Print the launch command of each process of a role in a topology");
  auto config = std::make_shared<std::string>();
  auto role = std::make_shared<std::string>();
  cmd->add_option("--config", *config, "Topology file (configs/*.env)")->required();
  cmd->add_option("--role", *role, "prefill | decode | router")->required();
  cmd->callback([config, role] { std::exit(print_launch(*config, *role)); });
}

void add_preflight_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("preflight", "Check a topology, the model directory and this node's ports");
  auto config = std::make_shared<std::string>();
  auto opt = std::make_shared<deploy::PreflightOptions>();
  cmd->add_option("--config", *config, "Topology file (configs/*.env)")->required();
  cmd->add_option("--node", opt->nodes, "This node's name in the topology (repeatable; default: host name, localhost)");
  cmd->add_flag("--all-nodes", opt->all_nodes, "Every process of the topology runs here (local mode)");
  cmd->callback([config, opt] { std::exit(preflight(*config, *opt)); });
}

}  // namespace pdserve::cli
