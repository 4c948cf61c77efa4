// Reading a topology file: a strict subset of shell assignments, so that deploy_pd.sh can
// `source` the same file and both readers agree on every value. Anything the shell would
// expand or interpret ($, backticks, ;, |, ...) is refused instead of guessed at.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include "pdserve/core/file_util.h"
#include "pdserve/deploy/topology.h"

namespace pdserve::deploy {
namespace {

// Keys only the deploy script reads; the parser keeps them so a typo elsewhere is still caught.
const std::set<std::string>& script_only_keys() {
  static const std::set<std::string> k = {"DEPLOY_MODE", "IMAGE",          "PDSERVE_BIN",       "RUN_ROOT",
                                          "SSH_OPTS",    "READY_TIMEOUT_S", "STOP_GRACE_S",     "MAX_CLOCK_SKEW_MS",
                                          "DOCKER_RUN_ARGS", "GPU_IDLE_MIB"};
  return k;
}

const std::set<std::string>& topology_keys() {
  static const std::set<std::string> k = {
      "MODEL_PATH",         "BIND_HOST",          "GPUS_PER_NODE",    "PAGE_SIZE",           "CHUNK_SIZE",
      "BOOTSTRAP_PORT",     "DIST_PORT",          "RDMA_NICS",        "ROUTER_NODE",         "ROUTER_PORT",
      "ROUTER_EXTRA_ARGS",  "PREFILL_NODES",      "PREFILL_PP",       "PREFILL_TP",          "PREFILL_EP",
      "PREFILL_PAGE_SIZE",  "PREFILL_PORT",       "PREFILL_MAX_RUNNING", "PREFILL_EXTRA_ARGS", "DECODE_NODES",
      "DECODE_PP",          "DECODE_TP",          "DECODE_EP",        "DECODE_PAGE_SIZE",    "DECODE_PORT",
      "DECODE_MAX_RUNNING", "DECODE_EXTRA_ARGS",  "CLUSTER_SECRET_FILE", "TRANSFER_BACKEND",  "RDMA_GID_INDEX",
      "KV_CACHE_DTYPE"};
  return k;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + static_cast<size_t>(a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string suggestion(const std::string& key) {
  std::string best;
  size_t best_d = 3;  // only near misses are worth suggesting
  for (const auto* set : {&topology_keys(), &script_only_keys()})
    for (const std::string& k : *set)
      if (size_t d = edit_distance(key, k); d < best_d) best_d = d, best = k;
  return best.empty() ? "" : " (did you mean " + best + "?)";
}

bool is_key_char(char c, bool first) { return c == '_' || std::isalpha(static_cast<unsigned char>(c)) || (!first && std::isdigit(static_cast<unsigned char>(c))); }

// Characters the shell would interpret in an unquoted word or inside "...".
bool shell_special(char c) { return std::string_view("$`\\;&|<>()!*?[]{}~").find(c) != std::string_view::npos; }

// Parses the value part of one line (after '='): words of unquoted, '...' and "..." text
// up to whitespace, then only an optional comment.
Result<std::string> parse_value(std::string_view s, const std::string& where) {
  std::string out;
  size_t i = 0;
  while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) {
    char c = s[i];
    if (c == '\'' || c == '"') {
      size_t end = s.find(c, i + 1);
      if (end == std::string_view::npos) return invalid_argument(where + ": unterminated " + std::string(1, c) + " quote");
      std::string_view inner = s.substr(i + 1, end - i - 1);
      if (c == '"')
        for (char q : inner)
          if (q == '$' || q == '`' || q == '\\')
            return invalid_argument(where + ": '" + std::string(1, q) +
                                    "' inside \"...\" would be expanded by the shell; write the value literally");
      out.append(inner);
      i = end + 1;
      continue;
    }
    if (shell_special(c) || c == '#')
      return invalid_argument(where + ": character '" + std::string(1, c) +
                              "' means something to the shell; quote the value with '...'");
    out.push_back(c);
    ++i;
  }
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  if (i < s.size() && s[i] != '#')
    return invalid_argument(where + ": unexpected text after the value: '" + std::string(s.substr(i)) +
                            "' (quote values that contain spaces)");
  return out;
}

std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : v) {
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      if (!cur.empty()) out.push_back(cur), cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

class Reader {
 public:
  Reader(const std::map<std::string, std::string>& kv, const std::string& src) : kv_(kv), src_(src) {}

  Status status() const { return st_; }

  void str(const char* key, std::string* out) {
    if (auto it = kv_.find(key); it != kv_.end()) *out = it->second;
  }
  template <typename Int>
  void integer(const char* key, Int* out, int64_t lo, int64_t hi) {
    auto it = kv_.find(key);
    if (it == kv_.end() || !st_.is_ok()) return;
    const std::string& v = it->second;
    int64_t x = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (v.empty() || ec != std::errc() || p != v.data() + v.size())
      st_ = invalid_argument(src_ + ": " + key + "='" + v + "' is not an integer");
    else if (x < lo || x > hi)
      st_ = invalid_argument(src_ + ": " + key + "=" + v + " must be in [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + "]");
    else
      *out = static_cast<Int>(x);
  }
  void list(const char* key, std::vector<std::string>* out) {
    if (auto it = kv_.find(key); it != kv_.end()) *out = split_list(it->second);
  }

 private:
  const std::map<std::string, std::string>& kv_;
  std::string src_;
  Status st_;
};

}  // namespace

Result<Topology> parse_topology_fields(std::string_view text, const std::string& source) {
  std::map<std::string, std::string> kv;
  std::map<std::string, int> line_of;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    const std::string where = source + ":" + std::to_string(line_no);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) line.remove_prefix(1);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    if (line.starts_with("export ")) line.remove_prefix(7);
    size_t k = 0;
    while (k < line.size() && is_key_char(line[k], k == 0)) ++k;
    if (k == 0 || k >= line.size() || line[k] != '=')
      return invalid_argument(where + ": expected KEY=VALUE with no spaces around '=', got '" + std::string(line) + "'");
    std::string key(line.substr(0, k));
    if (!topology_keys().count(key) && !script_only_keys().count(key))
      return invalid_argument(where + ": unknown key " + key + suggestion(key));
    if (auto it = line_of.find(key); it != line_of.end())
      return invalid_argument(where + ": " + key + " is set twice (first on line " + std::to_string(it->second) + ")");
    PDS_ASSIGN_OR_RETURN(std::string value, parse_value(line.substr(k + 1), where + ": " + key));
    kv[key] = value;
    line_of[key] = line_no;
  }

  Topology t;
  t.source = source;
  Reader r(kv, source);
  r.str("MODEL_PATH", &t.model_path);
  r.str("BIND_HOST", &t.bind_host);
  r.integer("GPUS_PER_NODE", &t.gpus_per_node, 0, 64);
  int64_t page_size = 64;
  r.integer("PAGE_SIZE", &page_size, 1, 4096);
  t.prefill.page_size = t.decode.page_size = page_size;
  r.integer("CHUNK_SIZE", &t.chunk_size, 1, int64_t{1} << 30);
  r.integer("BOOTSTRAP_PORT", &t.bootstrap_port, 1, 65535);
  r.integer("DIST_PORT", &t.dist_port, 1, 65534);
  r.list("RDMA_NICS", &t.rdma_nics);
  r.str("TRANSFER_BACKEND", &t.transfer_backend);
  r.str("KV_CACHE_DTYPE", &t.kv_cache_dtype);
  r.integer("RDMA_GID_INDEX", &t.rdma_gid_index, -1, 255);
  r.str("CLUSTER_SECRET_FILE", &t.cluster_secret_file);
  r.str("ROUTER_NODE", &t.router_node);
  r.integer("ROUTER_PORT", &t.router_port, 1, 65535);
  r.list("ROUTER_EXTRA_ARGS", &t.router_extra_args);
  t.prefill.port = 30000;
  t.decode.port = 30001;
  for (auto [side, p] : {std::pair{&t.prefill, std::string("PREFILL_")}, std::pair{&t.decode, std::string("DECODE_")}}) {
    r.list((p + "NODES").c_str(), &side->nodes);
    r.integer((p + "PP").c_str(), &side->pp, 1, 1024);
    r.integer((p + "TP").c_str(), &side->tp, 1, 1024);
    r.integer((p + "EP").c_str(), &side->ep, 1, 1024);
    r.integer((p + "PAGE_SIZE").c_str(), &side->page_size, 1, 4096);
    r.integer((p + "PORT").c_str(), &side->port, 1, 65535);
    r.integer((p + "MAX_RUNNING").c_str(), &side->max_running, 0, int64_t{1} << 20);
    r.list((p + "EXTRA_ARGS").c_str(), &side->extra_args);
  }
  PDS_RETURN_IF_ERROR(r.status());
  for (const auto& [key, value] : kv)
    if (script_only_keys().count(key)) t.script_keys[key] = value;
  return t;
}

Result<Topology> parse_topology(std::string_view text, const std::string& source) {
  PDS_ASSIGN_OR_RETURN(Topology t, parse_topology_fields(text, source));
  PDS_RETURN_IF_ERROR(validate_topology(t));
  return t;
}

Result<Topology> load_topology_fields(const std::string& path) {
  auto text = read_file(path);
  if (!text.is_ok()) return not_found("topology file " + path + " cannot be read: " + text.status().message());
  return parse_topology_fields(*text, path);
}

Result<Topology> load_topology(const std::string& path) {
  PDS_ASSIGN_OR_RETURN(Topology t, load_topology_fields(path));
  PDS_RETURN_IF_ERROR(validate_topology(t));
  return t;
}

}  // namespace pdserve::deploy
