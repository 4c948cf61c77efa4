#include "pdserve/transfer/rdma/gid.h"

#include <cstdio>

#include "pdserve/transfer/rdma/nic_config.h"

namespace pdserve::transfer::rdma {

const char* link_layer_name(LinkLayer l) {
  switch (l) {
    case LinkLayer::kInfiniBand: return "InfiniBand";
    case LinkLayer::kEthernet: return "RoCE (Ethernet)";
    default: return "unknown";
  }
}

const char* gid_type_name(GidType t) {
  switch (t) {
    case GidType::kIb: return "IB";
    case GidType::kRoceV1: return "RoCE v1";
    default: return "RoCE v2";
  }
}

bool gid_is_zero(const Gid& g) {
  for (uint8_t b : g)
    if (b) return false;
  return true;
}

bool gid_is_ipv4_mapped(const Gid& g) {
  for (int i = 0; i < 10; ++i)
    if (g[i]) return false;
  return g[10] == 0xff && g[11] == 0xff;
}

bool gid_is_link_local(const Gid& g) { return g[0] == 0xfe && (g[1] & 0xc0) == 0x80; }

std::string gid_to_string(const Gid& g) {
  char buf[64];
  std::string s;
  for (int i = 0; i < 16; i += 2) {
    std::snprintf(buf, sizeof buf, "%s%02x%02x", i ? ":" : "", g[i], g[i + 1]);
    s += buf;
  }
  if (gid_is_ipv4_mapped(g)) {
    std::snprintf(buf, sizeof buf, " (%u.%u.%u.%u)", g[12], g[13], g[14], g[15]);
    s += buf;
  }
  return s;
}

Result<GidEntry> choose_gid(const std::vector<GidEntry>& table, LinkLayer link, int configured_index) {
  if (configured_index != kAutoGidIndex) {
    for (const GidEntry& e : table) {
      if (e.index != configured_index) continue;
      if (gid_is_zero(e.gid)) return not_found("GID index " + std::to_string(configured_index) + " is empty on this port");
      return e;
    }
    return not_found("GID index " + std::to_string(configured_index) + " does not exist on this port (" +
                     std::to_string(table.size()) + " entries)");
  }
  if (link == LinkLayer::kInfiniBand) {
    for (const GidEntry& e : table)
      if (e.index == 0 && !gid_is_zero(e.gid)) return e;
    return not_found("InfiniBand port has no GID at index 0");
  }
  // RoCE: rank each usable entry; the lowest index wins a tie so the choice is stable.
  auto rank = [](const GidEntry& e) {
    if (gid_is_zero(e.gid) || gid_is_link_local(e.gid) || e.type == GidType::kIb) return 0;
    if (e.type == GidType::kRoceV2) return gid_is_ipv4_mapped(e.gid) ? 3 : 2;
    return 1;
  };
  const GidEntry* best = nullptr;
  for (const GidEntry& e : table) {
    const int r = rank(e);
    if (r > 0 && (!best || r > rank(*best) || (r == rank(*best) && e.index < best->index))) best = &e;
  }
  if (!best)
    return not_found("no usable RoCE GID (" + std::to_string(table.size()) +
                     " entries, none RoCE v1/v2 with a routable address); give the port an IP address or set --rdma-gid-index");
  return *best;
}

}  // namespace pdserve::transfer::rdma
