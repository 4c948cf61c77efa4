#include "pdserve/transfer/rdma/conn_info.h"

#include <cstring>
#include <set>

#include "pdserve/transfer/rdma/nic_config.h"

namespace pdserve::transfer::rdma {

namespace {
constexpr char kMagic[4] = {'P', 'D', 'R', 'C'};
constexpr size_t kHeader = 12, kPerNic = 32, kPerRegionFixed = 24;

template <typename T>
void put(std::string& s, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) s.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff));
}

struct Reader {
  const std::string& s;
  size_t at = 0;
  template <typename T>
  T get() {
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
    at += sizeof(T);
    return static_cast<T>(v);
  }
};

bool valid_mtu(uint16_t m) { return m == 256 || m == 512 || m == 1024 || m == 2048 || m == 4096; }
}  // namespace

std::string encode_conn_info(const ConnInfo& info) {
  std::string s(kMagic, 4);
  put<uint16_t>(s, kConnInfoVersion);
  put<uint16_t>(s, static_cast<uint16_t>(info.nics.size()));
  put<uint32_t>(s, static_cast<uint32_t>(info.regions.size()));
  for (const QpEndpoint& n : info.nics) {
    put<uint32_t>(s, n.qpn);
    put<uint32_t>(s, n.psn);
    put<uint16_t>(s, n.lid);
    put<uint16_t>(s, n.mtu);
    put<uint8_t>(s, n.gid_index);
    s.append(3, '\0');
    s.append(reinterpret_cast<const char*>(n.gid.data()), 16);
  }
  for (const RemoteRegion& r : info.regions) {
    put<uint32_t>(s, r.id);
    put<uint32_t>(s, 0);
    put<uint64_t>(s, r.addr);
    put<uint64_t>(s, r.size);
    for (size_t i = 0; i < info.nics.size(); ++i) put<uint32_t>(s, i < r.rkeys.size() ? r.rkeys[i] : 0);
  }
  return s;
}

Result<ConnInfo> decode_conn_info(const std::string& bytes) {
  if (bytes.size() < kHeader) return data_loss("rdma connection info: " + std::to_string(bytes.size()) + " bytes, shorter than its header");
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) return data_loss("rdma connection info: bad magic");
  Reader r{bytes, 4};
  const uint16_t version = r.get<uint16_t>();
  if (version != kConnInfoVersion)
    return data_loss("rdma connection info: version " + std::to_string(version) + ", this build speaks " + std::to_string(kConnInfoVersion));
  const uint16_t nics = r.get<uint16_t>();
  const uint32_t regions = r.get<uint32_t>();
  if (nics == 0 || nics > kMaxNics) return data_loss("rdma connection info: " + std::to_string(nics) + " NICs (1.." + std::to_string(kMaxNics) + ")");
  if (regions > kMaxConnInfoRegions) return data_loss("rdma connection info: " + std::to_string(regions) + " regions, at most " + std::to_string(kMaxConnInfoRegions));
  const uint64_t want = kHeader + uint64_t{nics} * kPerNic + uint64_t{regions} * (kPerRegionFixed + 4ull * nics);
  if (bytes.size() != want)
    return data_loss("rdma connection info: " + std::to_string(bytes.size()) + " bytes, its counts say " + std::to_string(want));
  ConnInfo info;
  for (uint16_t i = 0; i < nics; ++i) {
    QpEndpoint n;
    n.qpn = r.get<uint32_t>();
    n.psn = r.get<uint32_t>();
    n.lid = r.get<uint16_t>();
    n.mtu = r.get<uint16_t>();
    n.gid_index = r.get<uint8_t>();
    if (r.get<uint8_t>() || r.get<uint8_t>() || r.get<uint8_t>()) return data_loss("rdma connection info: NIC " + std::to_string(i) + " reserved bytes not 0");
    std::memcpy(n.gid.data(), bytes.data() + r.at, 16);
    r.at += 16;
    if (n.qpn == 0 || n.qpn >= (1u << 24) || n.psn >= (1u << 24))
      return data_loss("rdma connection info: NIC " + std::to_string(i) + " QPN / PSN out of the 24-bit range");
    if (!valid_mtu(n.mtu)) return data_loss("rdma connection info: NIC " + std::to_string(i) + " MTU " + std::to_string(n.mtu));
    info.nics.push_back(n);
  }
  std::set<RegionId> seen;
  for (uint32_t i = 0; i < regions; ++i) {
    RemoteRegion g;
    g.id = r.get<uint32_t>();
    if (r.get<uint32_t>() != 0) return data_loss("rdma connection info: region reserved bytes not 0");
    g.addr = r.get<uint64_t>();
    g.size = r.get<uint64_t>();
    for (uint16_t n = 0; n < nics; ++n) g.rkeys.push_back(r.get<uint32_t>());
    if (g.size == 0 || g.addr > UINT64_MAX - g.size) return data_loss("rdma connection info: region " + std::to_string(g.id) + " is empty or wraps");
    if (!seen.insert(g.id).second) return data_loss("rdma connection info: region " + std::to_string(g.id) + " listed twice");
    info.regions.push_back(std::move(g));
  }
  return info;
}

}  // namespace pdserve::transfer::rdma
