// The bootstrap plane's authentication: with a cluster secret, every request decode sends
// to prefill's bootstrap server carries an HMAC-SHA256 over (method, path, timestamp, nonce,
// SHA-256 of the body). Prefill refuses a missing, wrong, stale (> 60 s clock skew) or
// replayed signature with 401. No secret: both sides skip it (the default, for tests).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve::disagg {

inline constexpr const char* kAuthTimestampHeader = "X-Pdserve-Timestamp";
inline constexpr const char* kAuthNonceHeader = "X-Pdserve-Nonce";
inline constexpr const char* kAuthSignatureHeader = "X-Pdserve-Signature";
inline constexpr int64_t kAuthMaxSkewSeconds = 60;

class BootstrapAuth {
 public:
  explicit BootstrapAuth(std::string secret) : secret_(std::move(secret)) {}
  bool enabled() const { return !secret_.empty(); }

  // Header name/value pairs for one request (none when disabled).
  std::vector<std::pair<std::string, std::string>> sign(const std::string& method, const std::string& path,
                                                        const std::string& body) const;
  // ok, or why the request is refused. `now_s`: Unix seconds (a parameter for the tests).
  Status verify(const std::string& method, const std::string& path, const std::string& body,
                const std::string& timestamp, const std::string& nonce, const std::string& signature, int64_t now_s);
  Status verify(const std::string& method, const std::string& path, const std::string& body,
                const std::string& timestamp, const std::string& nonce, const std::string& signature);

  static std::string mac(const std::string& secret, const std::string& method, const std::string& path,
                         const std::string& timestamp, const std::string& nonce, const std::string& body);

 private:
  std::string secret_;
  std::mutex mu_;  // nonces seen within the skew window: a captured request cannot be replayed
  std::deque<std::pair<int64_t, std::string>> seen_order_;
  std::unordered_set<std::string> seen_;
};

std::string random_hex(size_t bytes);  // from std::random_device

}  // namespace pdserve::disagg
