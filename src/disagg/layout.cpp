#include "pdserve/disagg/layout.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "pdserve/core/file_util.h"

namespace pdserve::disagg {

namespace {
uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace

Json TransferInfo::to_json() const {
  Json j{{"version", version}, {"backend", backend}};
  if (backend == "rdma") {
    j["nics"] = nics;
    j["notify_slots"] = notify_slots;
  }
  return j;
}

Result<TransferInfo> TransferInfo::from_json(const Json& j) {
  if (!j.is_object()) return invalid_argument("layout.transfer: must be a JSON object");
  JsonFields f(j, "layout.transfer");
  TransferInfo t;
  PDS_ASSIGN_OR_RETURN(int64_t version, f.get_int("version"));
  if (version < 1 || version > 1000000) return f.error("version", "must be in [1, 1000000]");
  t.version = static_cast<int>(version);
  PDS_ASSIGN_OR_RETURN(t.backend, f.get_string("backend"));
  if (t.backend != "tcp" && t.backend != "rdma") return f.error("backend", "must be tcp or rdma");
  if (t.backend == "rdma") {
    PDS_ASSIGN_OR_RETURN(int64_t nics, f.get_int("nics"));
    if (nics < 1 || nics > 16) return f.error("nics", "must be in [1, 16]");
    t.nics = static_cast<int>(nics);
    PDS_ASSIGN_OR_RETURN(int64_t slots, f.get_int("notify_slots"));
    if (slots < 0 || slots > 4096) return f.error("notify_slots", "must be in [0, 4096]");
    t.notify_slots = static_cast<int>(slots);
  }
  return t;
}

TransferInfo transfer_info_of(const transfer::TransportCaps& caps) {
  TransferInfo t;
  std::string name = caps.name;
  const std::string wrap = "fault(";
  if (name.rfind(wrap, 0) == 0 && !name.empty() && name.back() == ')') name = name.substr(wrap.size(), name.size() - wrap.size() - 1);
  if (name == "rdma") {
    t.backend = "rdma";
    t.nics = caps.max_streams;
    t.notify_slots = caps.notify_slots;
  }
  return t;
}

Json KvLayout::to_json() const {
  Json j{{"protocol_version", protocol_version},
              {"role", role},
              {"instance_id", instance_id},
              {"model_fingerprint", model_fingerprint},
              {"tp", tp},
              {"page_size", page_size},
              {"kv_dtype", kv_dtype},
              {"mla_layers", mla_layers},
              {"entry_dim", entry_dim},
              {"num_pages", num_pages},
              {"kda_layers", kda.layers},
              {"kda_heads", kda.heads},
              {"kda_head_dim", kda.head_dim},
              {"kda_conv_tail", kda.conv_tail},
              {"state_dtype", state_dtype},
              {"state_layout", state_layout},
              {"num_slots", num_slots},
              {"checksum", checksum}};
  // Only a non-TCP transport says so: a TCP layout stays what older builds send and expect.
  if (transfer.backend != "tcp") j["transfer"] = transfer.to_json();
  return j;
}

Result<KvLayout> KvLayout::from_json(const Json& j) {
  if (!j.is_object()) return invalid_argument("layout: must be a JSON object");
  JsonFields f(j, "layout");
  KvLayout l;
  PDS_ASSIGN_OR_RETURN(int64_t version, f.get_int("protocol_version"));
  l.protocol_version = static_cast<int>(version);
  PDS_ASSIGN_OR_RETURN(l.role, f.get_string("role"));
  PDS_ASSIGN_OR_RETURN(l.instance_id, f.get_string("instance_id"));
  PDS_ASSIGN_OR_RETURN(l.model_fingerprint, f.get_string("model_fingerprint"));
  PDS_ASSIGN_OR_RETURN(int64_t tp, f.get_int("tp"));
  if (tp < 1 || tp > 1024) return f.error("tp", "must be in [1, 1024]");
  l.tp = static_cast<int>(tp);
  PDS_ASSIGN_OR_RETURN(l.page_size, f.get_int("page_size"));
  PDS_ASSIGN_OR_RETURN(l.kv_dtype, f.get_string("kv_dtype"));
  if (l.kv_dtype != "float32" && l.kv_dtype != "bfloat16") return f.error("kv_dtype", "must be float32 or bfloat16");
  PDS_ASSIGN_OR_RETURN(l.mla_layers, f.get_int("mla_layers"));
  PDS_ASSIGN_OR_RETURN(l.entry_dim, f.get_int("entry_dim"));
  PDS_ASSIGN_OR_RETURN(l.num_pages, f.get_int("num_pages"));
  PDS_ASSIGN_OR_RETURN(l.kda.layers, f.get_int("kda_layers"));
  PDS_ASSIGN_OR_RETURN(l.kda.heads, f.get_int("kda_heads"));
  PDS_ASSIGN_OR_RETURN(l.kda.head_dim, f.get_int("kda_head_dim"));
  PDS_ASSIGN_OR_RETURN(l.kda.conv_tail, f.get_int("kda_conv_tail"));
  PDS_ASSIGN_OR_RETURN(l.state_dtype, f.get_string("state_dtype"));
  PDS_ASSIGN_OR_RETURN(l.state_layout, f.get_string("state_layout"));
  PDS_ASSIGN_OR_RETURN(l.num_slots, f.get_int("num_slots"));
  PDS_ASSIGN_OR_RETURN(l.checksum, f.get_bool("checksum", true));
  if (j.contains("transfer")) {
    PDS_ASSIGN_OR_RETURN(l.transfer, TransferInfo::from_json(j.at("transfer")));
  }
  // Sizes feed offset arithmetic: keep them in ranges where products cannot overflow.
  auto in = [&](const char* k, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi) return f.error(k, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return Status::ok();
  };
  PDS_RETURN_IF_ERROR(in("page_size", l.page_size, 1, 1 << 16));
  PDS_RETURN_IF_ERROR(in("mla_layers", l.mla_layers, 0, 4096));
  PDS_RETURN_IF_ERROR(in("entry_dim", l.entry_dim, 1, 1 << 16));
  PDS_RETURN_IF_ERROR(in("num_pages", l.num_pages, 0, int64_t{1} << 28));
  PDS_RETURN_IF_ERROR(in("kda_layers", l.kda.layers, 0, 4096));
  PDS_RETURN_IF_ERROR(in("kda_heads", l.kda.heads, 0, 1 << 16));
  PDS_RETURN_IF_ERROR(in("kda_head_dim", l.kda.head_dim, 0, 1 << 12));
  PDS_RETURN_IF_ERROR(in("kda_conv_tail", l.kda.conv_tail, 0, 64));
  PDS_RETURN_IF_ERROR(in("num_slots", l.num_slots, 0, 1 << 20));
  if (l.kda.heads % l.tp != 0) return f.error("kda_heads", "must divide by tp " + std::to_string(l.tp));
  return l;
}

KvLayout describe_layout(const std::string& role, const ModelConfig& cfg, const std::string& fingerprint, int tp,
                         const MlaKvPool& kv, const KdaStatePool& state, bool checksum) {
  KvLayout l;
  l.role = role;
  l.instance_id = new_instance_id();
  l.model_fingerprint = fingerprint;
  l.tp = tp;
  l.page_size = kv.page_size();
  l.mla_layers = kv.num_layers();
  l.entry_dim = kv.entry_dim();
  l.kv_dtype = kv_cache_dtype_name(kv.dtype());
  l.num_pages = kv.num_pages();
  l.kda = KdaStateShape{cfg.num_kda_layers(), cfg.kda_num_heads, cfg.kda_head_dim, cfg.conv_kernel - 1};
  l.num_slots = state.num_slots();
  l.checksum = checksum;
  return l;
}

// config.json's bytes, the shard index's bytes, and every *.safetensors file's name, size and
// three 64 KiB samples (start, middle, end): two sides with different weights (another
// checkpoint, a re-quantised or partial copy) fail the pair check without reading hundreds
// of GB at startup.
Result<std::string> model_fingerprint(const std::string& model_dir) {
  PDS_ASSIGN_OR_RETURN(std::string text, read_file(join_path(model_dir, "config.json")));
  uint64_t h = fnv1a(text.data(), text.size());
  std::vector<std::pair<std::string, uint64_t>> shards;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(model_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "model.safetensors.index.json") {
      auto idx = read_file(e.path().string());
      if (idx.is_ok()) h = fnv1a(idx->data(), idx->size(), h);
    }
    if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0)
      shards.emplace_back(name, static_cast<uint64_t>(e.file_size(ec)));
  }
  if (ec) return io_error("model fingerprint: cannot list " + model_dir + ": " + ec.message());
  std::sort(shards.begin(), shards.end());
  std::vector<char> buf(64 << 10);
  for (const auto& [name, size] : shards) {
    h = fnv1a(name.data(), name.size(), h);
    h = fnv1a(&size, sizeof size, h);
    std::ifstream f(join_path(model_dir, name), std::ios::binary);
    if (!f) return io_error("model fingerprint: cannot read " + join_path(model_dir, name));
    for (uint64_t at : {uint64_t{0}, size / 2, size > buf.size() ? size - buf.size() : 0}) {
      f.clear();
      f.seekg(static_cast<std::streamoff>(at));
      f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      h = fnv1a(buf.data(), static_cast<size_t>(f.gcount()), h);
    }
  }
  return hex16(h);
}

std::string new_instance_id() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return hex16(v);
}

uint64_t hash_tokens(const std::vector<int32_t>& tokens) {
  return fnv1a(tokens.data(), tokens.size() * sizeof(int32_t));
}

Status check_pair(const KvLayout& p, const KvLayout& d) {
  auto differ = [](const std::string& field, const std::string& a, const std::string& b) {
    return invalid_argument("prefill/decode mismatch: " + field + ": prefill " + a + ", decode " + b +
                            "; both sides must be launched with the same value");
  };
  auto num = [](int64_t v) { return std::to_string(v); };
  if (p.protocol_version != d.protocol_version)
    return differ("protocol_version", num(p.protocol_version), num(d.protocol_version));
  if (p.model_fingerprint != d.model_fingerprint)
    return differ("model (fingerprint of config.json and weights)", p.model_fingerprint, d.model_fingerprint);
  if (p.page_size != d.page_size) return differ("page_size", num(p.page_size), num(d.page_size));
  if (p.kv_dtype != d.kv_dtype) return differ("kv_dtype", p.kv_dtype, d.kv_dtype);
  if (p.mla_layers != d.mla_layers) return differ("mla_layers", num(p.mla_layers), num(d.mla_layers));
  if (p.entry_dim != d.entry_dim) return differ("entry_dim", num(p.entry_dim), num(d.entry_dim));
  if (p.state_dtype != d.state_dtype) return differ("state_dtype", p.state_dtype, d.state_dtype);
  if (p.state_layout != d.state_layout) return differ("state_layout", p.state_layout, d.state_layout);
  if (p.kda.layers != d.kda.layers) return differ("kda_layers", num(p.kda.layers), num(d.kda.layers));
  if (p.kda.heads != d.kda.heads) return differ("kda_heads", num(p.kda.heads), num(d.kda.heads));
  if (p.kda.head_dim != d.kda.head_dim) return differ("kda_head_dim", num(p.kda.head_dim), num(d.kda.head_dim));
  if (p.kda.conv_tail != d.kda.conv_tail) return differ("kda_conv_tail", num(p.kda.conv_tail), num(d.kda.conv_tail));
  if (p.checksum != d.checksum)
    return differ("checksum", p.checksum ? "on" : "off", d.checksum ? "on" : "off");
  if (p.transfer.backend != d.transfer.backend)
    return invalid_argument("prefill/decode mismatch: transfer backend: prefill " + p.transfer.backend + ", decode " +
                            d.transfer.backend + "; launch both roles with the same --transfer-backend (and --rdma-nics)");
  if (p.transfer.backend == "rdma" && p.transfer.nics != d.transfer.nics)
    return differ("RDMA NIC count (--rdma-nics)", num(p.transfer.nics), num(d.transfer.nics));
  if (p.kda.heads % p.tp != 0 || p.kda.heads % d.tp != 0)
    return invalid_argument("prefill/decode mismatch: tp: prefill " + num(p.tp) + ", decode " + num(d.tp) +
                            "; both must divide the " + num(p.kda.heads) + " KDA heads");
  return Status::ok();
}

}  // namespace pdserve::disagg
