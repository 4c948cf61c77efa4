// Small pieces the authenticated TCP openings share (the NCCL-id bootstrap in
// rank_bootstrap.cpp and the node control stream in node_link.cpp): nonces, little-endian
// ids, the HMAC, whole-buffer send / receive on blocking sockets, time left to a deadline.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>

#include "pdserve/core/sha256.h"
#include "pdserve/core/status.h"
#include "socket_io.h"

namespace pdserve::transfer::link {

constexpr size_t kNonce = 16, kMac = 32;
using Clock = std::chrono::steady_clock;

inline std::string random_bytes(size_t n) {
  std::random_device rd;
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rd() & 0xff);
  return s;
}

inline std::string u32_le(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

inline uint32_t read_u32_le(const std::string& s) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(s[i])) << (8 * i);
  return v;
}

// Without a secret the MAC is all zeros and nobody checks it.
inline std::string mac(const std::string& secret, const std::string& message) {
  if (secret.empty()) return std::string(kMac, '\0');
  Sha256Digest d = hmac_sha256(secret, message);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

inline Status send_str(int fd, const std::string& s) {
  iovec v{const_cast<char*>(s.data()), s.size()};
  return net::send_all(fd, &v, 1);
}

inline Result<std::string> recv_str(int fd, size_t n) {
  std::string s(n, '\0');
  bool idle = false;
  PDS_RETURN_IF_ERROR(net::recv_exact_once(fd, s.data(), n, false, &idle));
  return s;
}

inline std::chrono::milliseconds left(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(ms, std::chrono::milliseconds(1));
}

}  // namespace pdserve::transfer::link
