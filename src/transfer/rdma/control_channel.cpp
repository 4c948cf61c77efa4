#include "control_channel.h"

#include "../socket_io.h"

namespace pdserve::transfer::rdma::control {

std::string put_u32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

std::string put_u64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

uint64_t Reader::get(size_t bytes) {
  if (short_read || s.size() - at < bytes) {
    short_read = true;
    return 0;
  }
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  at += bytes;
  return v;
}

Status Writer::send(Type type, const std::string& payload) {
  if (payload.size() > kMaxControlBytes) return invalid_argument("control message of " + std::to_string(payload.size()) + " bytes");
  std::string head = put_u32(static_cast<uint32_t>(type)) + put_u32(static_cast<uint32_t>(payload.size()));
  iovec iov[2] = {{head.data(), head.size()}, {const_cast<char*>(payload.data()), payload.size()}};
  std::lock_guard lk(mu_);
  return net::send_all(fd_, iov, payload.empty() ? 1 : 2);
}

Result<Message> receive(int fd, const std::atomic<bool>& stop) {
  std::string head(8, '\0');
  PDS_RETURN_IF_ERROR(net::recv_exact(fd, head.data(), 8, net::RecvMode::kBetweenFrames, [&] { return stop.load(); }));
  Reader r{head};
  const auto type = static_cast<uint32_t>(r.get(4));
  const auto length = static_cast<uint32_t>(r.get(4));
  if (type < 1 || type > static_cast<uint32_t>(Type::kRoomFailed)) return data_loss("rdma control: unknown message type " + std::to_string(type));
  if (length > kMaxControlBytes) return data_loss("rdma control: message of " + std::to_string(length) + " bytes");
  Message m{static_cast<Type>(type), std::string(length, '\0')};
  if (length) PDS_RETURN_IF_ERROR(net::recv_exact(fd, m.payload.data(), length, net::RecvMode::kMidMessage, [] { return false; }));
  return m;
}

std::string encode_grant(const Grant& g) {
  return put_u64(g.room) + put_u32(g.region) + put_u32(g.generation) + put_u64(g.offset) + put_u64(g.length);
}

Result<Grant> decode_grant(const std::string& p) {
  Reader r{p};
  Grant g;
  g.room = r.get(8);
  g.region = static_cast<RegionId>(r.get(4));
  g.generation = static_cast<Generation>(r.get(4));
  g.offset = r.get(8);
  g.length = r.get(8);
  if (!r.done()) return data_loss("rdma control: grant of " + std::to_string(p.size()) + " bytes");
  if (g.length == 0 || g.offset > UINT64_MAX - g.length) return data_loss("rdma control: empty or wrapping grant");
  return g;
}

}  // namespace pdserve::transfer::rdma::control
