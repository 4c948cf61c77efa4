#include "pdserve/deploy/preflight.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "pdserve/core/file_util.h"
#include "pdserve/core/json_util.h"
#include "pdserve/model/config.h"
#include "pdserve/model/safetensors.h"
#include "pdserve/transfer/rdma/nic_probe.h"
#include "pdserve/transfer/rdma/transport_policy.h"

namespace pdserve::deploy {
namespace {

std::vector<std::string> local_names() {
  std::vector<std::string> out = {"localhost", "127.0.0.1", "::1"};
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) == 0) {
    std::string h = buf;
    out.push_back(h);
    if (auto dot = h.find('.'); dot != std::string::npos) out.push_back(h.substr(0, dot));
  }
  return out;
}

// True when some socket listens on `port` (any address), per /proc/net/tcp and tcp6.
bool someone_listens(int port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    auto text = read_file(table);
    if (!text.is_ok()) continue;
    size_t pos = text->find('\n');  // skip the header
    while (pos != std::string::npos && pos + 1 < text->size()) {
      size_t end = text->find('\n', pos + 1);
      std::string line = text->substr(pos + 1, end == std::string::npos ? std::string::npos : end - pos - 1);
      pos = end;
      // "  sl  local_address rem_address   st ...": local is HEXADDR:HEXPORT, st 0A is LISTEN.
      char local[128] = {}, remote[128] = {};
      unsigned st = 0;
      if (sscanf(line.c_str(), "%*d: %127s %127s %x", local, remote, &st) != 3 || st != 0x0A) continue;
      const char* colon = strrchr(local, ':');
      if (colon && std::strtol(colon + 1, nullptr, 16) == port) return true;
    }
  }
  return false;
}

}  // namespace

std::vector<std::string> model_dir_problems(const std::string& dir) {
  std::vector<std::string> out;
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return {"model directory " + dir + " does not exist"};
  if (!file_exists(join_path(dir, "config.json"))) out.push_back(dir + ": config.json is missing");
  const std::string index = join_path(dir, "model.safetensors.index.json");
  if (file_exists(index)) {
    // The loader stops at the first missing shard; a copy that broke off usually lacks several.
    auto text = read_file(index);
    Json j = text.is_ok() ? Json::parse(*text, nullptr, false) : Json();
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      return {index + ": not a safetensors index (no weight_map object)"};
    std::set<std::string> shards;
    for (const auto& [name, file] : j["weight_map"].items())
      if (file.is_string()) shards.insert(file.get<std::string>());
    for (const std::string& f : shards) {
      const std::string path = join_path(dir, f);
      struct stat fs {};
      if (stat(path.c_str(), &fs) != 0)
        out.push_back("model shard " + path + " is missing (named by model.safetensors.index.json)");
      else if (fs.st_size == 0)
        out.push_back("model shard " + path + " is empty");
    }
  } else if (!file_exists(join_path(dir, "model.safetensors"))) {
    out.push_back(dir + ": neither model.safetensors.index.json nor model.safetensors exists");
  }
  if (!out.empty()) return out;
  // Headers, offsets against file sizes, tensors against the index; then the config's fields.
  if (auto ws = WeightStore::open_dir(dir); !ws.is_ok()) out.push_back(ws.status().message());
  if (auto mc = load_model_config(dir); !mc.is_ok()) out.push_back(mc.status().message());
  return out;
}

Status check_port_free(const std::string& host, int port, const std::string& key) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const std::string port_s = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), port_s.c_str(), &hints, &res); rc != 0)
    return invalid_argument(key + ": cannot resolve listen address " + host + ": " + gai_strerror(rc));
  Status st;
  for (addrinfo* a = res; a && st.is_ok(); a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // TIME_WAIT leftovers are fine
    // httplib listens with SO_REUSEPORT only, so the TIME_WAIT connections a stopped server
    // leaves make this bind fail although a new server would start; only a listener counts.
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 && (errno != EADDRINUSE || someone_listens(port))) {
      const int err = errno;
      st = err == EADDRINUSE
               ? Status(ErrorCode::kUnavailable, "port " + port_s + " (" + key + ") on " + host +
                                                     " is already in use; `ss -ltnp 'sport = :" + port_s +
                                                     "'` shows by what")
               : Status(ErrorCode::kUnavailable, "port " + port_s + " (" + key + ") on " + host +
                                                     " cannot be bound: " + strerror(err));
    }
    close(fd);
  }
  freeaddrinfo(res);
  return st;
}

void check_rdma_nics(const std::vector<std::string>& nics, PreflightReport* r, int gid_index, const std::string& backend) {
  namespace rdma = transfer::rdma;
  ++r->checks;
  const rdma::DeviceList here = rdma::list_devices();
  auto parsed = rdma::parse_nic_list(nics);
  if (!parsed.is_ok()) return r->problems.push_back("RDMA_NICS: " + parsed.status().message());
  if (parsed->empty()) return r->notes.push_back("rdma: RDMA_NICS is empty (TCP transfer); " + rdma::describe_devices(here));
  // The roles' own decision on these reports, so preflight says what they will run on.
  const std::vector<rdma::PortReport> reports = rdma::probe_nics(*parsed, gid_index);
  auto decision = rdma::decide_transport(backend.empty() ? "auto" : backend, *parsed, reports, here);
  if (decision.is_ok()) r->notes.push_back("rdma: the roles will transfer over " + decision->reason);
  for (const auto& rep : reports)
    if (rep.usable()) r->notes.push_back("rdma: " + rep.describe(here));  // the others are problems, below
  for (auto& p : rdma::nic_problems(reports, here)) r->problems.push_back(p);
}

PreflightReport run_preflight(const Topology& t, const PreflightOptions& opt) {
  PreflightReport r;
  r.problems = topology_problems(t);
  ++r.checks;
  const std::vector<std::string> here = opt.nodes.empty() ? local_names() : opt.nodes;
  auto is_here = [&](const std::string& n) {
    return opt.all_nodes || std::find(here.begin(), here.end(), n) != here.end();
  };
  if (!r.problems.empty() && (t.prefill.nodes.empty() || t.decode.nodes.empty())) return r;

  bool runs_model = false, runs_router = false;
  std::set<std::pair<std::string, int>> checked;
  for (Role role : {Role::kPrefill, Role::kDecode, Role::kRouter}) {
    const SideSpec* s = role == Role::kPrefill ? &t.prefill : role == Role::kDecode ? &t.decode : nullptr;
    std::vector<std::pair<std::string, std::pair<int, std::string>>> listeners;  // node, port, key
    if (s) {
      const int npi = t.nodes_per_instance(*s);
      for (size_t i = 0; i < s->nodes.size(); ++i) {
        if (!is_here(s->nodes[i])) continue;
        runs_model = true;
        if (i % npi != 0) continue;  // only an instance's first node listens
        const std::string p = role == Role::kPrefill ? "PREFILL_" : "DECODE_";
        listeners.push_back({s->nodes[i], {s->port, p + "PORT"}});
        if (role == Role::kPrefill) listeners.push_back({s->nodes[i], {t.bootstrap_port, "BOOTSTRAP_PORT"}});
      }
    } else if (is_here(t.router_host())) {
      runs_router = true;
      listeners.push_back({t.router_host(), {t.router_port, "ROUTER_PORT"}});
    }
    for (const auto& [node, pk] : listeners) {
      if (!checked.insert({opt.all_nodes ? "" : node, pk.first}).second) continue;  // reported by topology rules
      ++r.checks;
      if (Status st = check_port_free(t.bind_host, pk.first, pk.second); !st.is_ok()) r.problems.push_back(st.message());
    }
  }
  if (!runs_model && !runs_router) {
    // Nothing of the topology runs here: say so, or "1 checks passed" reads like a clean node.
    std::string names;
    for (const auto& n : here) names += (names.empty() ? "" : ", ") + n;
    r.notes.push_back("no process of this topology runs on this host (none of its nodes is " + names +
                      "): only the topology was checked, not the model, ports or RDMA NICs; run it on a "
                      "node of the topology (--node NAME), or with --all-nodes when every process runs here");
  }
  if (runs_model) {
    ++r.checks;
    for (auto& p : model_dir_problems(t.model_path)) r.problems.push_back(p);
    check_rdma_nics(t.rdma_nics, &r, t.rdma_gid_index, t.transfer_backend);
  }
  return r;
}

}  // namespace pdserve::deploy
