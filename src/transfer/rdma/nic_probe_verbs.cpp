// The ibverbs half of nic_probe.h: reads the device list, port attributes and GID tables.
// Read-only queries; no protection domain, queue or memory is created.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "pdserve/transfer/rdma/nic_probe.h"

namespace pdserve::transfer::rdma {

namespace {
struct DeviceListDeleter {
  void operator()(ibv_device** l) const { ibv_free_device_list(l); }
};
using DeviceListPtr = std::unique_ptr<ibv_device*, DeviceListDeleter>;

DeviceListPtr get_list(int* n, std::string* error) {
  errno = 0;
  DeviceListPtr l(ibv_get_device_list(n));
  if (!l) {
    *n = 0;
    const int err = errno ? errno : ENODEV;
    *error = err == ENOSYS ? "this kernel has no RDMA support: ibv_get_device_list: ENOSYS"
                           : std::string("ibv_get_device_list failed: ") + std::strerror(err);
  }
  return l;
}

int mtu_bytes(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    default: return 0;
  }
}

void read_port(ibv_context* ctx, int gid_index, PortReport* r) {
  ibv_port_attr attr{};
  if (ibv_query_port(ctx, static_cast<uint8_t>(r->nic.port), &attr) != 0) return;
  r->port_found = true;
  r->state = ibv_port_state_str(attr.state);
  r->active = attr.state == IBV_PORT_ACTIVE;
  r->link = attr.link_layer == IBV_LINK_LAYER_INFINIBAND ? LinkLayer::kInfiniBand
            : attr.link_layer == IBV_LINK_LAYER_ETHERNET ? LinkLayer::kEthernet
                                                          : LinkLayer::kUnknown;
  r->lid = attr.lid;
  r->active_mtu = mtu_bytes(attr.active_mtu);
  for (int i = 0; i < attr.gid_tbl_len; ++i) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, static_cast<uint32_t>(r->nic.port), static_cast<uint32_t>(i), &e, 0) != 0) continue;  // empty slot
    GidEntry g;
    g.index = i;
    g.type = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? GidType::kRoceV2 : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? GidType::kRoceV1 : GidType::kIb;
    std::memcpy(g.gid.data(), e.gid.raw, 16);
    if (!gid_is_zero(g.gid)) r->gids.push_back(g);
  }
  Result<GidEntry> chosen = choose_gid(r->gids, r->link, gid_index);
  if (chosen.is_ok())
    r->gid = *chosen;
  else
    r->gid_problem = chosen.status().message();
}
}  // namespace

DeviceList list_devices() {
  DeviceList out;
  int n = 0;
  DeviceListPtr l = get_list(&n, &out.error);
  for (int i = 0; i < n; ++i) out.devices.push_back(ibv_get_device_name(l.get()[i]));
  return out;
}

std::vector<PortReport> probe_nics(const std::vector<NicName>& nics, int gid_index) {
  std::vector<PortReport> out;
  int n = 0;
  std::string error;
  DeviceListPtr l = get_list(&n, &error);
  for (const NicName& nic : nics) {
    PortReport& r = out.emplace_back();
    r.nic = nic;
    for (int i = 0; i < n; ++i) {
      if (nic.device != ibv_get_device_name(l.get()[i])) continue;
      ibv_context* ctx = ibv_open_device(l.get()[i]);
      if (!ctx) break;  // reported as not found: the device exists but cannot be opened
      r.device_found = true;
      read_port(ctx, gid_index, &r);
      ibv_close_device(ctx);
      break;
    }
  }
  return out;
}

}  // namespace pdserve::transfer::rdma
