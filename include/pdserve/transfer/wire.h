// TCP wire format: every message is an 80-byte little-endian header, then `length` payload
// bytes. decode_header() checks everything it can from the header alone (magic, version,
// type, flags, reserved bytes, header checksum, per-type length limits, offset + length
// not wrapping) before a single payload byte is read; the connection checks the sequence
// number, and the AccessTable checks room, region, bounds and generation.
//
// offset  size  field
//  0      4     magic "PDST"
//  4      2     version (1)
//  6      2     type
//  8      4     flags
// 12      4     region        (kWrite)
// 16      4     generation    (kWrite, kNotify)
// 20      4     reserved, 0
// 24      8     room
// 32      8     batch         (sender's batch id, echoed in kAck)
// 40      8     seq           (per connection and direction, from 0, +1 per message)
// 48      8     offset        (kWrite: remote offset; kBatchEnd / kAck: bytes of the batch on this stream; kHello: stream index)
// 56      8     length        (payload bytes that follow)
// 64      8     aux           (kHello/kHelloAck: instance id; kBatchEnd: write count; kAck/kAuth: ErrorCode)
// 72      4     payload check (reserved for issue 16: 0 unless kFlagPayloadCheck)
// 76      4     header check  (FNV-1a 32 of bytes 0..75)
#pragma once

#include <cstddef>
#include <cstdint>

#include "pdserve/transfer/types.h"

namespace pdserve::transfer::wire {

constexpr uint32_t kMagic = 0x54534450;  // "PDST" in little-endian byte order
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderBytes = 80;

enum class FrameType : uint16_t {
  kHello = 1,     // sender -> receiver, first message on a connection
  kHelloAck = 2,  // receiver -> sender
  kWrite = 3,     // payload = bytes for [offset, offset + length) of region
  kBatchEnd = 4,  // this stream carried all its writes of the batch; ack please
  kNotify = 5,    // payload = the room's notification
  kAck = 6,       // receiver -> sender; payload = error message when aux != 0
  kAuth = 7,      // handshake with a cluster secret: sender's MAC; receiver's verdict (aux, message)
};

constexpr uint32_t kFlagNotifyAck = 1;     // kAck answers a kNotify, not a kBatchEnd
constexpr uint32_t kFlagPayloadCheck = 2;  // reserved: payload check present (issue 16)
constexpr uint32_t kFlagAuth = 4;          // hello / hello-ack: authenticated handshake, nonce (+ MAC) attached
constexpr uint32_t kKnownFlags = kFlagNotifyAck | kFlagAuth;
constexpr uint64_t kMaxHandshakeBytes = 64;  // hello / hello-ack / kAuth payload (nonce, MAC)

struct Limits {
  uint64_t max_write_bytes = 1ull << 30;   // one write frame; larger writes are split
  uint64_t max_notify_bytes = 64 * 1024;
  uint64_t max_error_bytes = 1024;
};

struct FrameHeader {
  FrameType type = FrameType::kWrite;
  uint32_t flags = 0;
  RegionId region = 0;
  Generation generation = 0;
  RoomId room = 0;
  uint64_t batch = 0;
  uint64_t seq = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t aux = 0;
};

void encode_header(const FrameHeader& h, uint8_t out[kHeaderBytes]);
// kDataLoss naming the first field that is wrong.
Result<FrameHeader> decode_header(const uint8_t in[kHeaderBytes], const Limits& limits);
uint32_t fnv1a32(const uint8_t* data, size_t n);

}  // namespace pdserve::transfer::wire
