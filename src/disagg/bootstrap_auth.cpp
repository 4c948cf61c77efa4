#include "pdserve/disagg/bootstrap_auth.h"

#include <chrono>
#include <random>

#include "pdserve/core/sha256.h"

namespace pdserve::disagg {

namespace {
int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}
Status refused(const std::string& why) { return Status(ErrorCode::kInvalidArgument, "unauthenticated: " + why); }
constexpr size_t kMaxSeenNonces = 100000;  // bounds memory under a flood of valid requests
}  // namespace

std::string random_hex(size_t bytes) {
  std::random_device rd;
  std::string raw(bytes, '\0');
  for (auto& c : raw) c = static_cast<char>(rd() & 0xff);
  return to_hex(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
}

std::string BootstrapAuth::mac(const std::string& secret, const std::string& method, const std::string& path,
                               const std::string& timestamp, const std::string& nonce, const std::string& body) {
  // Newline-separated: none of the fields can hold one (checked on receipt), so no ambiguity.
  return hmac_sha256_hex(secret, "pdserve-bootstrap-v1\n" + method + "\n" + path + "\n" + timestamp + "\n" + nonce +
                                     "\n" + sha256_hex(body));
}

std::vector<std::pair<std::string, std::string>> BootstrapAuth::sign(const std::string& method, const std::string& path,
                                                                     const std::string& body) const {
  if (!enabled()) return {};
  const std::string ts = std::to_string(unix_now());
  const std::string nonce = random_hex(16);
  return {{kAuthTimestampHeader, ts}, {kAuthNonceHeader, nonce},
          {kAuthSignatureHeader, mac(secret_, method, path, ts, nonce, body)}};
}

Status BootstrapAuth::verify(const std::string& method, const std::string& path, const std::string& body,
                             const std::string& timestamp, const std::string& nonce, const std::string& signature) {
  return verify(method, path, body, timestamp, nonce, signature, unix_now());
}

Status BootstrapAuth::verify(const std::string& method, const std::string& path, const std::string& body,
                             const std::string& timestamp, const std::string& nonce, const std::string& signature,
                             int64_t now_s) {
  if (!enabled()) return Status::ok();
  if (timestamp.empty() || nonce.empty() || signature.empty())
    return refused(std::string("no signature (") + kAuthSignatureHeader + "); is the cluster secret set on decode?");
  if (timestamp.size() > 20 || timestamp.find_first_not_of("0123456789") != std::string::npos)
    return refused("malformed timestamp");
  if (nonce.size() < 16 || nonce.size() > 64 || nonce.find_first_not_of("0123456789abcdef") != std::string::npos)
    return refused("malformed nonce");
  const int64_t ts = std::stoll(timestamp);
  if (ts < now_s - kAuthMaxSkewSeconds || ts > now_s + kAuthMaxSkewSeconds)
    return refused("stale signature: timestamp " + timestamp + " is more than " + std::to_string(kAuthMaxSkewSeconds) +
                   " s from this host's clock " + std::to_string(now_s) + " (clock skew?)");
  if (!constant_time_equal(mac(secret_, method, path, timestamp, nonce, body), signature))
    return refused("wrong signature (a different cluster secret?)");
  std::lock_guard<std::mutex> lock(mu_);
  while (!seen_order_.empty() &&
         (seen_order_.front().first < now_s - 2 * kAuthMaxSkewSeconds || seen_order_.size() > kMaxSeenNonces)) {
    seen_.erase(seen_order_.front().second);
    seen_order_.pop_front();
  }
  if (!seen_.insert(nonce).second) return refused("replayed request (nonce seen before)");
  seen_order_.emplace_back(ts, nonce);
  return Status::ok();
}

}  // namespace pdserve::disagg
