// GID choice for one NIC port, from the port's GID table. Pure (the table is read by the
// discovery code), so every rule is unit-tested without a device.
//
// InfiniBand: the LID routes inside a subnet; GID index 0 (the port GID) is used.
// RoCE: no LID. We prefer a RoCE v2 GID holding an IPv4-mapped address (::ffff:a.b.c.d):
// v2 is routable over UDP/IP, and the IPv4 one is what switches' ECN/PFC configs expect.
// Then any RoCE v2 GID, then RoCE v1. Link-local (fe80::/10) and all-zero entries never win
// an automatic choice. A configured index wins outright, but must exist and be non-zero.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::transfer::rdma {

enum class LinkLayer { kUnknown, kInfiniBand, kEthernet };
enum class GidType { kIb, kRoceV1, kRoceV2 };

using Gid = std::array<uint8_t, 16>;

struct GidEntry {
  int index = 0;
  GidType type = GidType::kIb;
  Gid gid{};
};

const char* link_layer_name(LinkLayer l);  // "InfiniBand", "RoCE (Ethernet)", "unknown"
const char* gid_type_name(GidType t);      // "IB", "RoCE v1", "RoCE v2"
// "fe80:0000:...": eight groups, like ibv_devinfo -v; IPv4-mapped ones end " (a.b.c.d)".
std::string gid_to_string(const Gid& g);
bool gid_is_zero(const Gid& g);
bool gid_is_ipv4_mapped(const Gid& g);
bool gid_is_link_local(const Gid& g);

// configured_index: kAutoGidIndex (-1) or the operator's index. kNotFound naming the port's
// table when nothing usable exists.
Result<GidEntry> choose_gid(const std::vector<GidEntry>& table, LinkLayer link, int configured_index);

}  // namespace pdserve::transfer::rdma
