#include "topology_args.h"

namespace pdserve::cli {

CLI::Option* add_config_option(CLI::App* cmd, std::string* path) {
  return cmd->add_option("--config", *path, "Topology file (configs/*.env); flags given here win over it");
}

bool flag_given(const CLI::App& cmd, const std::string& flag) {
  const CLI::Option* o = cmd.get_option_no_throw(flag);
  return o != nullptr && o->count() > 0;
}

Status apply_topology_to_runtime(const CLI::App& cmd, const std::string& path, std::optional<deploy::Role> role,
                                 RoleFields f) {
  if (role == deploy::Role::kRouter) return invalid_argument("apply_topology_to_runtime: the router has no runtime");
  PDS_ASSIGN_OR_RETURN(deploy::Topology t, deploy::load_topology(path));
  const deploy::SideSpec* side = !role ? nullptr : *role == deploy::Role::kPrefill ? &t.prefill : &t.decode;
  auto set = [&](const char* flag, auto* field, auto value) {
    if (field && !flag_given(cmd, flag)) *field = value;
  };
  set("--model", f.model_dir, t.model_path);
  set("--host", f.host, t.bind_host);
  if (f.runtime) {
    // Both sides' page sizes are equal (validated), so serve can take either.
    set("--page-size", &f.runtime->page_size, t.prefill.page_size);
    set("--chunk-size", &f.runtime->chunk_size, t.chunk_size);
    if (!t.kv_cache_dtype.empty()) {
      DType d = DType::kF32;
      PDS_RETURN_IF_ERROR(runtime::parse_kv_cache_dtype(t.kv_cache_dtype, &d));  // validated with the topology too
      set("--kv-cache-dtype", &f.runtime->kv_cache_dtype, d);
    }
    if (side && side->max_running > 0) set("--max-running", &f.runtime->max_running, side->max_running);
  }
  if (side) {
    set("--port", f.port, side->port);
    set("--tp", f.tp, side->tp);
    set("--pp", f.pp, side->pp);
    if (*role == deploy::Role::kPrefill) set("--bootstrap-port", f.bootstrap_port, t.bootstrap_port);
    if (*role == deploy::Role::kDecode) set("--allow-prefill", f.allowed_prefills, deploy::prefill_bootstrap_addresses(t));
    if (!t.cluster_secret_file.empty()) set("--cluster-secret-file", f.cluster_secret_file, t.cluster_secret_file);
    if (!t.rdma_nics.empty()) set("--rdma-nics", f.rdma_nics, t.rdma_nics);
  }
  return Status::ok();
}

}  // namespace pdserve::cli
