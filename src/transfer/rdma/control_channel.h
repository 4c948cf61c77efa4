// Messages on an RDMA peer's control connection (internal), after the TCP hello handshake.
// Each is u32 type, u32 length, then `length` payload bytes (little-endian), at most
// kMaxControlBytes; the reader treats the bytes as hostile.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "pdserve/transfer/types.h"

namespace pdserve::transfer::rdma::control {

enum class Type : uint32_t {
  kConnInfo = 1,   // encode_conn_info: sender -> decode (its QPs), decode -> sender (QPs, regions)
  kRing = 2,       // decode -> sender: u32 slots, u32 slot_bytes of its notification ring
  kGrant = 3,      // decode -> sender: u64 room, u32 region, u32 generation, u64 offset, u64 length
  kRevoke = 4,     // decode -> sender: u64 room, u64 token
  kRevokeAck = 5,  // sender -> decode: u64 token, once nothing of the room is in flight
  kCredit = 6,     // decode -> sender: u32 slot, consumed
  kSync = 7,       // sender -> decode: u64 token; sent when a room has no grant here yet
  kSyncAck = 8,    // decode -> sender: u64 token; every grant made before it was sent first
  kRoomFailed = 9, // sender -> decode: u64 room, u32 generation; a batch of the room failed, or the room did
                   // here (a queue pair in error): its notification will never come
};

constexpr uint32_t kMaxControlBytes = 1u << 20;

struct Message {
  Type type = Type::kConnInfo;
  std::string payload;
};

// Serialises senders on one fd.
class Writer {
 public:
  explicit Writer(int fd) : fd_(fd) {}
  Status send(Type type, const std::string& payload);

 private:
  int fd_;
  std::mutex mu_;
};

// Blocks for the next message; kAborted once stop is set (checked at each idle timeout).
Result<Message> receive(int fd, const std::atomic<bool>& stop);

std::string put_u32(uint32_t v);
std::string put_u64(uint64_t v);
// Reads little-endian fields off the front of a payload; ok() false once it ran short.
struct Reader {
  const std::string& s;
  size_t at = 0;
  bool short_read = false;
  uint64_t get(size_t bytes);
  bool done() const { return !short_read && at == s.size(); }
};

std::string encode_grant(const Grant& g);
Result<Grant> decode_grant(const std::string& p);

}  // namespace pdserve::transfer::rdma::control
