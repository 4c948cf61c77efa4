#include "pdserve/transfer/rdma/nic_config.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace pdserve::transfer::rdma {

namespace {
bool device_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'; }

Result<NicName> parse_one(const std::string& item) {
  NicName n;
  std::string dev = item;
  if (const size_t colon = item.find(':'); colon != std::string::npos) {
    dev = item.substr(0, colon);
    const std::string port = item.substr(colon + 1);
    if (port.empty() || port.size() > 3 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return invalid_argument("RDMA NIC '" + item + "': the port after ':' must be a number 1..255");
    n.port = std::stoi(port);
    if (n.port < 1 || n.port > 255) return invalid_argument("RDMA NIC '" + item + "': port must be 1..255");
  }
  if (dev.empty()) return invalid_argument("RDMA NIC '" + item + "' has an empty device name");
  if (!std::all_of(dev.begin(), dev.end(), device_char))
    return invalid_argument("RDMA NIC '" + item + "' has a character outside [A-Za-z0-9_.-] in its device name");
  n.device = dev;
  return n;
}
}  // namespace

Result<std::vector<NicName>> parse_nic_list(const std::vector<std::string>& items) {
  std::vector<NicName> out;
  std::set<std::string> seen;
  for (const std::string& item : items) {
    PDS_ASSIGN_OR_RETURN(NicName n, parse_one(item));
    if (!seen.insert(n.to_string()).second) return invalid_argument("RDMA NIC " + n.to_string() + " is listed twice");
    out.push_back(std::move(n));
  }
  if (out.size() > kMaxNics)
    return invalid_argument(std::to_string(out.size()) + " RDMA NICs listed; at most " + std::to_string(kMaxNics));
  return out;
}

Result<std::vector<NicName>> parse_nic_list(const std::string& text) {
  std::vector<std::string> items;
  std::string cur;
  for (char c : text + ",") {
    if (c == ',' || c == ' ' || c == '\t') {
      if (!cur.empty()) items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return parse_nic_list(items);
}

Status RdmaConfig::validate() const {
  auto bad = [](const char* field, const std::string& what) { return invalid_argument(std::string("rdma ") + field + ": " + what); };
  if (auto parsed = parse_nic_list(nics); !parsed.is_ok()) return bad("nics", parsed.status().message());
  if (gid_index < kAutoGidIndex || gid_index > 255) return bad("gid_index", "must be -1 (automatic) or 0..255");
  if (max_outstanding_wrs < 1 || max_outstanding_wrs > 16384) return bad("max_outstanding_wrs", "must be in [1, 16384]");
  if (max_wr_bytes == 0 || max_wr_bytes > (1ull << 31)) return bad("max_wr_bytes", "must be in [1, 2^31] (one RDMA WRITE)");
  if (stripe_alignment == 0 || (stripe_alignment & (stripe_alignment - 1)) != 0)
    return bad("stripe_alignment", "must be a power of two");
  if (max_wr_bytes % stripe_alignment != 0) return bad("max_wr_bytes", "must be a multiple of stripe_alignment");
  if (min_stripe_bytes == 0) return bad("min_stripe_bytes", "must be positive");
  return Status::ok();
}

}  // namespace pdserve::transfer::rdma
