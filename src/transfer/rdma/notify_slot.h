// One slot of decode's notification ring (internal): a 32-byte header, then the payload. The
// sender fills its staging copy and writes it with an immediate carrying the slot index;
// decode reads the header as hostile (magic, length within the slot) before anything else.
//   u32 magic "PDNT", u32 generation, u64 room, u64 batch bytes, u32 payload length, u32 0
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "pdserve/transfer/types.h"

namespace pdserve::transfer::rdma {

constexpr uint32_t kNotifyMagic = 0x544e4450;  // "PDNT"
constexpr uint64_t kNotifyHeaderBytes = 32;

struct NotifySlot {
  RoomId room = 0;
  Generation generation = 0;
  uint64_t batch_bytes = 0;
  std::string payload;
};

inline uint64_t fill_notify_slot(uint8_t* slot, const NotifySlot& n) {
  const uint32_t len = static_cast<uint32_t>(n.payload.size()), zero = 0;
  std::memcpy(slot, &kNotifyMagic, 4);
  std::memcpy(slot + 4, &n.generation, 4);
  std::memcpy(slot + 8, &n.room, 8);
  std::memcpy(slot + 16, &n.batch_bytes, 8);
  std::memcpy(slot + 24, &len, 4);
  std::memcpy(slot + 28, &zero, 4);
  std::memcpy(slot + kNotifyHeaderBytes, n.payload.data(), len);
  return kNotifyHeaderBytes + len;
}

inline Result<NotifySlot> read_notify_slot(const uint8_t* slot, uint64_t slot_bytes) {
  uint32_t magic, len, zero;
  NotifySlot n;
  std::memcpy(&magic, slot, 4);
  std::memcpy(&n.generation, slot + 4, 4);
  std::memcpy(&n.room, slot + 8, 8);
  std::memcpy(&n.batch_bytes, slot + 16, 8);
  std::memcpy(&len, slot + 24, 4);
  std::memcpy(&zero, slot + 28, 4);
  if (magic != kNotifyMagic || zero != 0) return data_loss("rdma notification slot: bad header");
  if (len > slot_bytes - kNotifyHeaderBytes) return data_loss("rdma notification slot: payload of " + std::to_string(len) + " bytes overruns the slot");
  n.payload.assign(reinterpret_cast<const char*>(slot + kNotifyHeaderBytes), len);
  return n;
}

}  // namespace pdserve::transfer::rdma
