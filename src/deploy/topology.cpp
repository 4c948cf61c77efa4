// Cross-key rules of a topology and the launch command of every process it describes.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "pdserve/deploy/topology.h"

namespace pdserve::deploy {
namespace {

bool valid_name(const std::string& s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || c == ':';
  });
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// GPUs one instance of a side uses on each of its nodes.
int gpus_per_instance_node(const Topology& t, const SideSpec& s) {
  return t.gpus_per_node == 0 ? 0 : std::min(s.pp * s.tp, t.gpus_per_node);
}

Status check_side(const Topology& t, const SideSpec& s, const std::string& p) {
  const std::string& src = t.source;
  if (s.nodes.empty()) return invalid_argument(src + ": " + p + "NODES is missing or empty");
  std::set<std::string> seen;
  for (const std::string& n : s.nodes) {
    if (!valid_name(n)) return invalid_argument(src + ": " + p + "NODES has an invalid host name '" + n + "'");
    if (!seen.insert(n).second) return invalid_argument(src + ": " + p + "NODES lists " + n + " twice");
  }
  // pdserve splits the routed experts over the TP ranks (docs/design.md), so EP is TP.
  if (s.ep != 0 && s.ep != s.tp)
    return invalid_argument(src + ": " + p + "EP=" + std::to_string(s.ep) + " must equal " + p + "TP=" +
                            std::to_string(s.tp) + " (pdserve splits the experts over the TP ranks)");
  if (t.gpus_per_node > 0) {
    const int gpus = s.pp * s.tp;
    if (gpus > t.gpus_per_node && gpus % t.gpus_per_node != 0)
      return invalid_argument(src + ": " + p + "PP x " + p + "TP = " + std::to_string(gpus) +
                              " GPUs do not fill whole nodes of GPUS_PER_NODE=" + std::to_string(t.gpus_per_node));
    const int npi = t.nodes_per_instance(s);
    if (s.nodes.size() % npi != 0)
      return invalid_argument(src + ": " + p + "NODES has " + std::to_string(s.nodes.size()) + " nodes, but one PP" +
                              std::to_string(s.pp) + " x TP" + std::to_string(s.tp) + " instance spans " +
                              std::to_string(npi) + " nodes of " + std::to_string(t.gpus_per_node) + " GPUs");
  }
  return Status::ok();
}

}  // namespace

const char* role_name(Role r) {
  switch (r) {
    case Role::kPrefill: return "prefill";
    case Role::kDecode: return "decode";
    case Role::kRouter: return "router";
  }
  return "?";
}

Result<Role> parse_role(std::string_view s) {
  if (s == "prefill") return Role::kPrefill;
  if (s == "decode") return Role::kDecode;
  if (s == "router") return Role::kRouter;
  return invalid_argument("role '" + std::string(s) + "' is not one of prefill, decode, router");
}

int Topology::nodes_per_instance(const SideSpec& s) const {
  if (gpus_per_node == 0) return 1;
  const int gpus = s.pp * s.tp;
  return gpus <= gpus_per_node ? 1 : gpus / gpus_per_node;
}

std::vector<std::string> topology_problems(const Topology& t) {
  std::vector<std::string> out;
  const std::string& src = t.source;
  auto add = [&](const std::string& m) { out.push_back(src + ": " + m); };
  auto add_status = [&](const Status& st) {
    if (!st.is_ok()) out.push_back(st.message());
  };
  if (t.model_path.empty()) add("MODEL_PATH is missing or empty");
  if (!valid_name(t.bind_host)) add("BIND_HOST='" + t.bind_host + "' is not an address");
  const Status ps = check_side(t, t.prefill, "PREFILL_"), ds = check_side(t, t.decode, "DECODE_");
  add_status(ps);
  add_status(ds);
  if (t.decode.pp != 1)
    add("DECODE_PP=" + std::to_string(t.decode.pp) +
        " is not supported: decode runs every token through all layers, so it must be 1");
  // Rank mapping between the sides needs one TP size to divide the other (docs/design.md).
  const int pt = t.prefill.tp, dt = t.decode.tp;
  if (std::max(pt, dt) % std::min(pt, dt) != 0)
    add("PREFILL_TP=" + std::to_string(pt) + " and DECODE_TP=" + std::to_string(dt) +
        ": one must divide the other for the state to be sliced between them");
  if (t.prefill.page_size != t.decode.page_size)
    add("page size mismatch: PREFILL_PAGE_SIZE=" + std::to_string(t.prefill.page_size) +
        " but DECODE_PAGE_SIZE=" + std::to_string(t.decode.page_size) +
        " (decode refuses every transfer from a prefill with another page size)");
  for (const std::string& nic : t.rdma_nics)
    if (!valid_name(nic)) add("RDMA_NICS has an invalid device name '" + nic + "'");
  if (!t.transfer_backend.empty() && t.transfer_backend != "tcp" && t.transfer_backend != "rdma" && t.transfer_backend != "auto")
    add("TRANSFER_BACKEND must be tcp, rdma or auto (got '" + t.transfer_backend + "')");
  if (!t.kv_cache_dtype.empty() && t.kv_cache_dtype != "float32" && t.kv_cache_dtype != "bfloat16")
    add("KV_CACHE_DTYPE must be float32 or bfloat16 (got '" + t.kv_cache_dtype + "')");
  if (t.transfer_backend == "rdma" && t.rdma_nics.empty())
    add("TRANSFER_BACKEND=rdma needs RDMA_NICS (the NICs both roles transfer over)");
  if (!ps.is_ok() || !ds.is_ok()) return out;  // the rules below need both node lists sound
  if (!valid_name(t.router_host())) add("ROUTER_NODE='" + t.router_node + "' is not a host name");

  // Two listeners on one node must not share a port, and a shared node's GPUs must suffice.
  std::map<std::string, std::map<int, std::string>> ports;  // node -> port -> key
  auto claim = [&](const std::string& node, int port, const std::string& key) {
    auto [it, fresh] = ports[node].emplace(port, key);
    if (!fresh) add(it->second + " and " + key + " are both " + std::to_string(port) + " on node " + node);
  };
  for (auto [side, p] : {std::pair{&t.prefill, std::string("PREFILL_")}, std::pair{&t.decode, std::string("DECODE_")}}) {
    const int npi = t.nodes_per_instance(*side);
    for (size_t i = 0; i < side->nodes.size(); i += npi) {
      claim(side->nodes[i], side->port, p + "PORT");
      if (side == &t.prefill) claim(side->nodes[i], t.bootstrap_port, "BOOTSTRAP_PORT");
      if (npi > 1) claim(side->nodes[i], t.dist_port + (side == &t.decode), side == &t.decode ? "DIST_PORT+1" : "DIST_PORT");
    }
  }
  claim(t.router_host(), t.router_port, "ROUTER_PORT");
  if (t.gpus_per_node > 0) {
    const int need = gpus_per_instance_node(t, t.prefill) + gpus_per_instance_node(t, t.decode);
    for (const std::string& n : t.prefill.nodes)
      if (std::find(t.decode.nodes.begin(), t.decode.nodes.end(), n) != t.decode.nodes.end() && need > t.gpus_per_node)
        add("node " + n + " runs prefill and decode, which need " + std::to_string(need) +
            " GPUs, more than GPUS_PER_NODE=" + std::to_string(t.gpus_per_node));
  }
  return out;
}

Status validate_topology(const Topology& t) {
  auto problems = topology_problems(t);
  return problems.empty() ? Status::ok() : invalid_argument(problems.front());
}

Topology one_host_topology(const std::string& model_dir) {
  Topology t;
  t.source = "(pdserve up)";
  t.model_path = model_dir;
  t.bind_host = "127.0.0.1";
  t.gpus_per_node = 0;
  t.prefill.nodes = {"127.0.0.1"};
  t.decode.nodes = {"127.0.0.1"};
  t.prefill.port = 30000;
  t.decode.port = 30001;
  return t;
}

std::vector<std::string> prefill_urls(const Topology& t) {
  std::vector<std::string> out;
  const int npi = t.nodes_per_instance(t.prefill);
  for (size_t i = 0; i < t.prefill.nodes.size(); i += npi)
    out.push_back("http://" + t.prefill.nodes[i] + ":" + std::to_string(t.prefill.port) + "@" +
                  std::to_string(t.bootstrap_port));
  return out;
}

std::vector<std::string> prefill_bootstrap_addresses(const Topology& t) {
  std::vector<std::string> out;
  const int npi = t.nodes_per_instance(t.prefill);
  for (size_t i = 0; i < t.prefill.nodes.size(); i += npi)
    out.push_back(t.prefill.nodes[i] + ":" + std::to_string(t.bootstrap_port));
  return out;
}

std::vector<std::string> decode_urls(const Topology& t) {
  std::vector<std::string> out;
  const int npi = t.nodes_per_instance(t.decode);
  for (size_t i = 0; i < t.decode.nodes.size(); i += npi)
    out.push_back("http://" + t.decode.nodes[i] + ":" + std::to_string(t.decode.port));
  return out;
}

Result<std::vector<LaunchSpec>> launch_specs(const Topology& t, Role role) {
  PDS_RETURN_IF_ERROR(validate_topology(t));
  std::vector<LaunchSpec> out;
  if (role == Role::kRouter) {
    LaunchSpec l{Role::kRouter, 0, t.router_host(), {}, {}, {}};
    l.args = {"router", "--pd", "--host", t.bind_host, "--port", std::to_string(t.router_port)};
    for (const auto& u : prefill_urls(t)) l.args.insert(l.args.end(), {"--prefill", u});
    for (const auto& u : decode_urls(t)) l.args.insert(l.args.end(), {"--decode", u});
    if (!t.cluster_secret_file.empty()) l.args.insert(l.args.end(), {"--cluster-secret-file", t.cluster_secret_file});
    l.args.insert(l.args.end(), t.router_extra_args.begin(), t.router_extra_args.end());
    l.url = "http://" + l.node + ":" + std::to_string(t.router_port);
    out.push_back(std::move(l));
    return out;
  }
  const bool prefill = role == Role::kPrefill;
  const SideSpec& s = prefill ? t.prefill : t.decode;
  const int npi = t.nodes_per_instance(s);
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const std::string& leader = s.nodes[i - i % npi];
    LaunchSpec l{role, static_cast<int>(i), s.nodes[i], {}, {}, {}};
    auto& a = l.args;
    a = {role_name(role), "--model", t.model_path, "--host", t.bind_host, "--port", std::to_string(s.port)};
    if (prefill) a.insert(a.end(), {"--bootstrap-port", std::to_string(t.bootstrap_port)});
    a.insert(a.end(), {"--tp", std::to_string(s.tp), "--page-size", std::to_string(s.page_size)});
    if (prefill) a.insert(a.end(), {"--chunk-size", std::to_string(t.chunk_size)});
    // Decode takes rooms only from this topology's prefills (what the router names).
    if (!prefill)
      for (const std::string& addr : prefill_bootstrap_addresses(t)) a.insert(a.end(), {"--allow-prefill", addr});
    if (s.max_running > 0) a.insert(a.end(), {"--max-running", std::to_string(s.max_running)});
    // Flags past this point only appear when the topology needs them (multi-GPU deployments).
    if (s.pp > 1) a.insert(a.end(), {"--pp", std::to_string(s.pp)});
    if (npi > 1)
      a.insert(a.end(), {"--nnodes", std::to_string(npi), "--node-rank", std::to_string(i % npi), "--dist-init-addr",
                         leader + ":" + std::to_string(t.dist_port + (prefill ? 0 : 1))});
    if (!t.rdma_nics.empty()) a.insert(a.end(), {"--rdma-nics", join(t.rdma_nics, ",")});
    // Both roles get the same transfer settings: the pair check refuses a TCP/RDMA mix.
    if (!t.transfer_backend.empty()) a.insert(a.end(), {"--transfer-backend", t.transfer_backend});
    // One value for both roles: decode refuses a prefill whose pages have another dtype.
    if (!t.kv_cache_dtype.empty()) a.insert(a.end(), {"--kv-cache-dtype", t.kv_cache_dtype});
    if (t.rdma_gid_index >= 0) a.insert(a.end(), {"--rdma-gid-index", std::to_string(t.rdma_gid_index)});
    if (!t.cluster_secret_file.empty()) a.insert(a.end(), {"--cluster-secret-file", t.cluster_secret_file});
    // GPU nodes run the CUDA backend (GPUS_PER_NODE=0: the CPU one), unless EXTRA_ARGS name a device.
    const bool device_given = std::any_of(s.extra_args.begin(), s.extra_args.end(), [](const std::string& x) {
      return x == "--device" || x.rfind("--device=", 0) == 0;
    });
    if (t.gpus_per_node > 0 && !device_given) a.insert(a.end(), {"--device", "cuda"});
    a.insert(a.end(), s.extra_args.begin(), s.extra_args.end());
    if (t.gpus_per_node > 0) {
      // A node shared by both sides gives prefill the first GPUs and decode the next ones.
      int first = 0;
      if (!prefill && std::find(t.prefill.nodes.begin(), t.prefill.nodes.end(), s.nodes[i]) != t.prefill.nodes.end())
        first = gpus_per_instance_node(t, t.prefill);
      std::vector<std::string> ids;
      for (int g = 0; g < gpus_per_instance_node(t, s); ++g) ids.push_back(std::to_string(first + g));
      l.env.push_back("CUDA_VISIBLE_DEVICES=" + join(ids, ","));
    }
    if (i % npi == 0) l.url = "http://" + s.nodes[i] + ":" + std::to_string(s.port);
    out.push_back(std::move(l));
  }
  return out;
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("-_./:=@,+%").find(c) != std::string_view::npos;
      }))
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? " " : "") + shell_quote(words[i]);
  return out;
}

}  // namespace pdserve::deploy
