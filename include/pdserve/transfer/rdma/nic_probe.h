// What this host's RDMA NICs look like: the device list, and per configured NIC its port
// state, link layer, LID and GID table with the chosen GID. probe_nics() reads the devices
// through libibverbs; everything after that (the verdict, the descriptions) is pure and
// unit-tested on hand-made reports.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pdserve/transfer/rdma/gid.h"
#include "pdserve/transfer/rdma/nic_config.h"

namespace pdserve::transfer::rdma {

struct DeviceList {
  std::vector<std::string> devices;  // ibv_get_device_list's names, in its order
  std::string error;                 // non-empty when the list could not be read at all
};

struct PortReport {
  NicName nic;
  bool device_found = false;
  bool port_found = false;
  bool active = false;             // IBV_PORT_ACTIVE
  std::string state;               // "ACTIVE", "DOWN", ... as ibv_devinfo prints it
  LinkLayer link = LinkLayer::kUnknown;
  uint16_t lid = 0;                // InfiniBand only
  int active_mtu = 0;              // bytes
  std::vector<GidEntry> gids;      // non-empty entries of the port's table
  std::optional<GidEntry> gid;     // choose_gid's answer
  std::string gid_problem;         // why gid is empty

  bool usable() const { return device_found && port_found && active && gid.has_value(); }
  // "mlx5_0:1 ACTIVE RoCE (Ethernet) GID[3] RoCE v2 0000:...:ffff:0a00:0001 (10.0.0.1) mtu 4096"
  // or what is wrong: "mlx5_2:1 not found (devices here: mlx5_0 mlx5_1)".
  std::string describe(const DeviceList& here) const;
};

DeviceList list_devices();
// One report per configured NIC, in the configured order.
std::vector<PortReport> probe_nics(const std::vector<NicName>& nics, int gid_index);

// "no RDMA devices (ibv_get_device_list found none)" or "2 RDMA devices: mlx5_0 mlx5_1".
std::string describe_devices(const DeviceList& here);
// One line per unusable NIC, saying what is wrong; empty when every NIC is usable.
std::vector<std::string> nic_problems(const std::vector<PortReport>& reports, const DeviceList& here);

}  // namespace pdserve::transfer::rdma
