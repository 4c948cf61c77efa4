// The RDMA settings an operator gives: which NICs ("mlx5_0,mlx5_1"), which GID index (or
// automatic choice), and the bounds on work in flight. Pure: parsing and validation need no
// device, so they are unit-tested everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::transfer::rdma {

constexpr int kAutoGidIndex = -1;
constexpr size_t kMaxNics = 16;

struct RdmaConfig {
  std::vector<std::string> nics;   // device names as ibv_devices prints them; each may carry ":PORT"
  int gid_index = kAutoGidIndex;   // -1: prefer RoCE v2 IPv4-mapped, see gid.h
  int max_outstanding_wrs = 256;   // per NIC and peer: the send queue depth we post into
  uint64_t max_wr_bytes = 1ull << 30;   // one RDMA WRITE at most this long (HCA limit is 2 GiB)
  uint64_t stripe_alignment = 4096;     // NIC shares of a run start on this boundary
  uint64_t min_stripe_bytes = 256 * 1024;  // a run is split across NICs only into pieces this big

  Status validate() const;  // names the bad field
};

// One configured NIC: device name and port (1 unless "mlx5_0:2").
struct NicName {
  std::string device;
  int port = 1;
  std::string to_string() const { return device + ":" + std::to_string(port); }
};

// "mlx5_0,mlx5_1 mlx5_2:2" (commas and/or spaces). Refuses empty names, characters outside
// [A-Za-z0-9_.-], ports outside 1..255, a NIC listed twice and more than kMaxNics.
Result<std::vector<NicName>> parse_nic_list(const std::string& text);
Result<std::vector<NicName>> parse_nic_list(const std::vector<std::string>& items);

}  // namespace pdserve::transfer::rdma
