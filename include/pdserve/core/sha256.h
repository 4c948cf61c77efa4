// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104). Small and dependency-free: the bench's
// input checksums, and the cluster secret's signatures on the bootstrap and transfer planes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pdserve {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Sha256Digest digest();     // finishes the hash; call once
  std::string hex_digest();  // the same, as lowercase hex (sha256sum's format)

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);
Sha256Digest hmac_sha256(std::string_view key, std::string_view message);
std::string hmac_sha256_hex(std::string_view key, std::string_view message);
std::string to_hex(const uint8_t* data, size_t n);
// Compares without an early exit, so the time taken says nothing about where they differ.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace pdserve
