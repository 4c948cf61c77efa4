// SHA-256, for the inputs checksum (sha256sum-compatible hex). Small and dependency-free.
#pragma once

#include <cstdint>
#include <string>

namespace pdserve::bench {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(const std::string& s) { update(s.data(), s.size()); }
  std::string hex_digest();  // finishes the hash; call once

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const std::string& data);

}  // namespace pdserve::bench
