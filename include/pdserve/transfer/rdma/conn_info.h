// What two RDMA peers exchange out of band before the first write: per NIC, the QP's number,
// starting PSN, LID, GID and MTU; per registered region, its address, size and rkey on each
// NIC. Carried over the transfer listener's TCP connection after its (authenticated) hello,
// so the cluster secret gates it like every TCP write. Pure encode / decode; decode treats
// the bytes as hostile (lengths, counts and versions are checked before use).
//
// Little-endian layout: "PDRC" u16 version u16 nics u32 regions, then per NIC
// {u32 qpn, u32 psn, u16 lid, u16 mtu, u8 gid_index, u8[3] 0, u8[16] gid}, then per region
// {u32 id, u32 0, u64 addr, u64 size, u32 rkey[nics]}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdserve/transfer/rdma/gid.h"
#include "pdserve/transfer/types.h"

namespace pdserve::transfer::rdma {

struct QpEndpoint {
  uint32_t qpn = 0;   // 24 bits
  uint32_t psn = 0;   // 24 bits
  uint16_t lid = 0;
  uint16_t mtu = 4096;
  uint8_t gid_index = 0;
  Gid gid{};
};

struct RemoteRegion {
  RegionId id = 0;
  uint64_t addr = 0;
  uint64_t size = 0;
  std::vector<uint32_t> rkeys;  // one per NIC
};

struct ConnInfo {
  std::vector<QpEndpoint> nics;
  std::vector<RemoteRegion> regions;
};

constexpr uint16_t kConnInfoVersion = 1;
constexpr size_t kMaxConnInfoRegions = 4096;

std::string encode_conn_info(const ConnInfo& info);
// kDataLoss naming what is wrong: magic, version, counts, a truncated or over-long message,
// a 24-bit field out of range, an MTU that is not 256..4096, a region that wraps or repeats.
Result<ConnInfo> decode_conn_info(const std::string& bytes);

}  // namespace pdserve::transfer::rdma
