#include "pdserve/disagg/selftest.h"

#include <cstring>

namespace pdserve::disagg {

namespace {
uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

Json SelfTestRequest::to_json() const {
  return Json{{"room", room},     {"generation", generation}, {"transfer_host", transfer_host},
              {"transfer_port", transfer_port}, {"length", length}, {"nonce", nonce}};
}

Result<SelfTestRequest> SelfTestRequest::from_json(const Json& j) {
  if (!j.is_object()) return invalid_argument("selftest: must be a JSON object");
  JsonFields f(j, "selftest");
  SelfTestRequest r;
  for (const char* k : {"room", "length", "nonce"})
    if (!j.contains(k) || !j.at(k).is_number_unsigned()) return f.error(k, "must be an unsigned integer");
  r.room = j.at("room").get<uint64_t>();
  r.length = j.at("length").get<uint64_t>();
  r.nonce = j.at("nonce").get<uint64_t>();
  if (r.room == 0) return f.error("room", "must be nonzero");
  if (r.length == 0 || r.length > kMaxSelfTestBytes) return f.error("length", "must be in [1, 64 MiB]");
  PDS_ASSIGN_OR_RETURN(int64_t gen, f.get_int("generation"));
  if (gen < 0 || gen > 0xffffffffll) return f.error("generation", "must fit 32 bits");
  r.generation = static_cast<uint32_t>(gen);
  PDS_ASSIGN_OR_RETURN(r.transfer_host, f.get_string("transfer_host"));
  PDS_ASSIGN_OR_RETURN(int64_t port, f.get_int("transfer_port"));
  if (port < 1 || port > 65535) return f.error("transfer_port", "must be in [1, 65535]");
  r.transfer_port = static_cast<int>(port);
  return r;
}

void fill_pattern(uint8_t* out, uint64_t n, uint64_t nonce) {
  for (uint64_t i = 0; i < n; i += 8) {
    const uint64_t w = splitmix(nonce ^ (i * 0x2545f4914f6cdd1dull));
    std::memcpy(out + i, &w, std::min<uint64_t>(8, n - i));
  }
}

Status check_pattern(const uint8_t* in, uint64_t n, uint64_t nonce) {
  for (uint64_t i = 0; i < n; i += 8) {
    const uint64_t w = splitmix(nonce ^ (i * 0x2545f4914f6cdd1dull));
    uint8_t want[8];
    std::memcpy(want, &w, 8);
    for (uint64_t k = 0; k < 8 && i + k < n; ++k)
      if (in[i + k] != want[k])
        return data_loss("self-test: byte " + std::to_string(i + k) + " of " + std::to_string(n) + " differs (got " +
                         std::to_string(in[i + k]) + ", want " + std::to_string(want[k]) + ")");
  }
  return Status::ok();
}

}  // namespace pdserve::disagg
