// Which local memory exists (registered regions) and which of it each room may receive
// (grants). Shared by every transport: the TCP receiver checks each incoming write here;
// an RDMA transport checks notifications here and registers only these regions.
//
// Rules: a write is admitted only if its region is registered, [offset, offset + length)
// lies inside the region and inside grants of that room made under the same generation,
// and the room has not failed. Grants of different rooms never overlap. While a write is
// admitted (pinned), revoke() of its room and unregister_region() of its region wait, so a
// page freed and handed to another request can never receive a late byte.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "pdserve/transfer/types.h"

namespace pdserve::transfer {

class AccessTable;

// Keeps a region (and for receives, a room) in use until destroyed.
class Pin {
 public:
  Pin() = default;
  Pin(Pin&& o) noexcept { *this = std::move(o); }
  Pin& operator=(Pin&& o) noexcept;
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
  ~Pin() { release(); }
  uint8_t* data() const { return data_; }
  void release();

 private:
  friend class AccessTable;
  AccessTable* table_ = nullptr;
  RegionId region_ = 0;
  bool has_room_ = false;
  RoomId room_ = 0;
  uint8_t* data_ = nullptr;
};

class AccessTable {
 public:
  Status register_region(const MemoryRegion& region);
  // Refused while grants into the region exist; waits for pinned reads / writes to end.
  Status unregister_region(RegionId id);

  Status grant(const Grant& g);
  // Drops every grant of the room and its failed mark; waits for its pinned writes.
  Status revoke(RoomId room);

  // Sender side: a local source range, pinned until the batch finishes.
  Result<Pin> pin_source(RegionId region, uint64_t offset, uint64_t length);
  // Sender side, a whole batch: refuses empty writes and remote ranges that wrap, then pins
  // every source (in write order); on the first refusal the pins taken so far are released.
  Result<std::vector<Pin>> pin_sources(const BatchRequest& req);
  // Receiver side: the full check for one incoming write; the pin gives the destination.
  Result<Pin> admit_write(RoomId room, Generation gen, RegionId region, uint64_t offset, uint64_t length);
  // A notification is admitted if the room holds a grant under gen and has not failed.
  Status admit_notify(RoomId room, Generation gen);
  // Marks the room failed (later writes and notifications refused). True the first time.
  bool fail_room(RoomId room);
  bool room_failed(RoomId room) const;

 private:
  friend class Pin;
  struct GrantRange {
    uint64_t end;
    RoomId room;
    Generation gen;
  };
  struct RegionEntry {
    MemoryRegion region;
    int inflight = 0;
    std::map<uint64_t, GrantRange> grants;  // start -> range; ranges never overlap
  };
  struct RoomEntry {
    std::vector<std::pair<RegionId, uint64_t>> grants;  // (region, start)
    int inflight = 0;
    bool failed = false;
  };
  void unpin(RegionId region, bool has_room, RoomId room);
  Status covered(const RegionEntry& e, RoomId room, Generation gen, uint64_t offset, uint64_t length) const;

  mutable std::mutex mu_;
  std::condition_variable idle_;
  std::unordered_map<RegionId, RegionEntry> regions_;
  std::unordered_map<RoomId, RoomEntry> rooms_;
};

}  // namespace pdserve::transfer
