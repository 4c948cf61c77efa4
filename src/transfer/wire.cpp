#include "pdserve/transfer/wire.h"

#include <string>

namespace pdserve::transfer::wire {

namespace {
template <typename T>
void put(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
}
template <typename T>
T get(const uint8_t* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return static_cast<T>(v);
}
Status bad(const std::string& what) { return data_loss("bad transfer frame: " + what); }
}  // namespace

uint32_t fnv1a32(const uint8_t* data, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) h = (h ^ data[i]) * 16777619u;
  return h;
}

void encode_header(const FrameHeader& h, uint8_t out[kHeaderBytes]) {
  put<uint32_t>(out + 0, kMagic);
  put<uint16_t>(out + 4, kVersion);
  put<uint16_t>(out + 6, static_cast<uint16_t>(h.type));
  put<uint32_t>(out + 8, h.flags);
  put<uint32_t>(out + 12, h.region);
  put<uint32_t>(out + 16, h.generation);
  put<uint32_t>(out + 20, 0);
  put<uint64_t>(out + 24, h.room);
  put<uint64_t>(out + 32, h.batch);
  put<uint64_t>(out + 40, h.seq);
  put<uint64_t>(out + 48, h.offset);
  put<uint64_t>(out + 56, h.length);
  put<uint64_t>(out + 64, h.aux);
  put<uint32_t>(out + 72, 0);
  put<uint32_t>(out + 76, fnv1a32(out, 76));
}

Result<FrameHeader> decode_header(const uint8_t in[kHeaderBytes], const Limits& limits) {
  if (get<uint32_t>(in) != kMagic) return bad("magic");
  if (get<uint16_t>(in + 4) != kVersion) return bad("version " + std::to_string(get<uint16_t>(in + 4)) + ", expected " + std::to_string(kVersion));
  if (get<uint32_t>(in + 76) != fnv1a32(in, 76)) return bad("header checksum");
  FrameHeader h;
  const uint16_t type = get<uint16_t>(in + 6);
  if (type < 1 || type > 7) return bad("type " + std::to_string(type));
  h.type = static_cast<FrameType>(type);
  h.flags = get<uint32_t>(in + 8);
  if (h.flags & ~kKnownFlags) return bad("unknown flags " + std::to_string(h.flags));
  if (get<uint32_t>(in + 20) != 0 || get<uint32_t>(in + 72) != 0) return bad("reserved bytes not zero");
  h.region = get<uint32_t>(in + 12);
  h.generation = get<uint32_t>(in + 16);
  h.room = get<uint64_t>(in + 24);
  h.batch = get<uint64_t>(in + 32);
  h.seq = get<uint64_t>(in + 40);
  h.offset = get<uint64_t>(in + 48);
  h.length = get<uint64_t>(in + 56);
  h.aux = get<uint64_t>(in + 64);
  if ((h.flags & kFlagNotifyAck) && h.type != FrameType::kAck) return bad("notify-ack flag on a non-ack");
  if ((h.flags & kFlagAuth) && h.type != FrameType::kHello && h.type != FrameType::kHelloAck)
    return bad("auth flag on a message other than hello");
  switch (h.type) {
    case FrameType::kWrite:
      if (h.length == 0 || h.length > limits.max_write_bytes) return bad("write length " + std::to_string(h.length));
      if (h.offset > UINT64_MAX - h.length) return bad("write offset + length wraps");
      break;
    case FrameType::kNotify:
      if (h.length > limits.max_notify_bytes) return bad("notification length " + std::to_string(h.length));
      break;
    case FrameType::kAck:
      if (h.length > limits.max_error_bytes) return bad("ack message length " + std::to_string(h.length));
      if (h.aux > static_cast<uint64_t>(ErrorCode::kDeadlineExceeded)) return bad("ack status " + std::to_string(h.aux));
      if (h.aux == 0 && h.length != 0) return bad("ok ack with a message");
      break;
    case FrameType::kHello:
    case FrameType::kHelloAck:
      if (h.length > kMaxHandshakeBytes) return bad("hello length " + std::to_string(h.length));
      break;
    case FrameType::kAuth:
      if (h.aux > static_cast<uint64_t>(ErrorCode::kDeadlineExceeded)) return bad("auth status " + std::to_string(h.aux));
      if (h.length > (h.aux == 0 ? kMaxHandshakeBytes : limits.max_error_bytes))
        return bad("auth length " + std::to_string(h.length));
      break;
    default:
      if (h.length != 0) return bad("payload on a control message");
  }
  return h;
}

}  // namespace pdserve::transfer::wire
