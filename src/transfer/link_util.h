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

// The opening both links share. The listener sends a fresh nonce ns; the joiner answers
// rank (u32) + its nonce nc + MAC(label + ns + nc + rank); the listener replies one verdict
// byte ('\0' accepted, '\1' refused) and, when accepted, its own payload, whose MAC the
// caller binds to both nonces.
struct Join {
  uint32_t rank = 0;
  bool accepted = false;  // listener: the joiner's MAC checks out; joiner: the verdict byte
  std::string ns, nc;
};

// Listener side: an I/O error is an error; a wrong MAC is a Join with accepted = false.
inline Result<Join> read_join(int fd, const std::string& secret, const std::string& label) {
  Join j;
  j.ns = random_bytes(kNonce);
  PDS_RETURN_IF_ERROR(send_str(fd, j.ns));
  PDS_ASSIGN_OR_RETURN(std::string hello, recv_str(fd, 4 + kNonce + kMac));
  j.rank = read_u32_le(hello);
  j.nc = hello.substr(4, kNonce);
  j.accepted = secret.empty() || constant_time_equal(hello.substr(4 + kNonce), mac(secret, label + j.ns + j.nc + u32_le(j.rank)));
  return j;
}

// Joiner side: returns the nonces and the listener's verdict (its payload follows when accepted).
inline Result<Join> send_join(int fd, uint32_t rank, const std::string& secret, const std::string& label) {
  Join j;
  j.rank = rank;
  PDS_ASSIGN_OR_RETURN(j.ns, recv_str(fd, kNonce));
  j.nc = random_bytes(kNonce);
  PDS_RETURN_IF_ERROR(send_str(fd, u32_le(rank) + j.nc + mac(secret, label + j.ns + j.nc + u32_le(rank))));
  PDS_ASSIGN_OR_RETURN(std::string verdict, recv_str(fd, 1));
  j.accepted = verdict[0] == '\0';
  return j;
}

}  // namespace pdserve::transfer::link
