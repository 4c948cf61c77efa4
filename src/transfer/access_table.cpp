#include "pdserve/transfer/access_table.h"

#include <string>

namespace pdserve::transfer {

namespace {
// end of [offset, offset + length) without wrapping; false when it would wrap.
bool range_end(uint64_t offset, uint64_t length, uint64_t* end) {
  if (length > UINT64_MAX - offset) return false;
  *end = offset + length;
  return true;
}
std::string range_str(uint64_t offset, uint64_t length) {
  return "[" + std::to_string(offset) + ", +" + std::to_string(length) + ")";
}
}  // namespace

Pin& Pin::operator=(Pin&& o) noexcept {
  if (this != &o) {
    release();
    table_ = o.table_;
    region_ = o.region_;
    has_room_ = o.has_room_;
    room_ = o.room_;
    data_ = o.data_;
    o.table_ = nullptr;
  }
  return *this;
}

void Pin::release() {
  if (table_) table_->unpin(region_, has_room_, room_);
  table_ = nullptr;
}

Status AccessTable::register_region(const MemoryRegion& r) {
  if (r.base == nullptr || r.size == 0) return invalid_argument("region " + std::to_string(r.id) + " is empty");
  uint64_t end;
  if (!range_end(reinterpret_cast<uint64_t>(r.base), r.size, &end)) return invalid_argument("region wraps the address space");
  std::lock_guard lk(mu_);
  if (regions_.count(r.id)) return invalid_argument("region " + std::to_string(r.id) + " is already registered");
  regions_[r.id].region = r;
  return Status::ok();
}

Status AccessTable::unregister_region(RegionId id) {
  std::unique_lock lk(mu_);
  auto it = regions_.find(id);
  if (it == regions_.end()) return not_found("region " + std::to_string(id) + " is not registered");
  if (!it->second.grants.empty()) return invalid_argument("region " + std::to_string(id) + " still has grants; revoke their rooms first");
  // Re-find after each wake: the map may rehash while we wait.
  idle_.wait(lk, [&] {
    auto r = regions_.find(id);
    return r == regions_.end() || r->second.inflight == 0;
  });
  regions_.erase(id);
  return Status::ok();
}

Status AccessTable::grant(const Grant& g) {
  std::lock_guard lk(mu_);
  auto it = regions_.find(g.region);
  if (it == regions_.end()) return not_found("grant into unregistered region " + std::to_string(g.region));
  RegionEntry& e = it->second;
  uint64_t end;
  if (g.length == 0 || !range_end(g.offset, g.length, &end) || end > e.region.size)
    return out_of_range("grant " + range_str(g.offset, g.length) + " outside region '" + e.region.name + "' of " +
                        std::to_string(e.region.size) + " bytes");
  // The first range starting at or after end cannot overlap; the one before it might.
  auto next = e.grants.lower_bound(end);
  if (next != e.grants.begin()) {
    auto prev = std::prev(next);
    if (prev->second.end > g.offset)
      return invalid_argument("grant " + range_str(g.offset, g.length) + " for room " + std::to_string(g.room) +
                              " overlaps a grant of room " + std::to_string(prev->second.room));
  }
  e.grants.emplace(g.offset, GrantRange{end, g.room, g.generation});
  rooms_[g.room].grants.emplace_back(g.region, g.offset);
  return Status::ok();
}

Status AccessTable::revoke(RoomId room) {
  std::unique_lock lk(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end()) return Status::ok();  // idempotent: failure paths may revoke twice
  for (auto [region, start] : it->second.grants) {
    auto r = regions_.find(region);
    if (r != regions_.end()) r->second.grants.erase(start);
  }
  it->second.grants.clear();
  idle_.wait(lk, [&] {
    auto r = rooms_.find(room);
    return r == rooms_.end() || r->second.inflight == 0;
  });
  it = rooms_.find(room);
  if (it != rooms_.end() && it->second.grants.empty()) rooms_.erase(it);
  return Status::ok();
}

Result<Pin> AccessTable::pin_source(RegionId region, uint64_t offset, uint64_t length) {
  std::lock_guard lk(mu_);
  auto it = regions_.find(region);
  if (it == regions_.end()) return not_found("local region " + std::to_string(region) + " is not registered");
  uint64_t end;
  if (!range_end(offset, length, &end) || end > it->second.region.size)
    return out_of_range("read " + range_str(offset, length) + " outside local region '" + it->second.region.name + "'");
  ++it->second.inflight;
  Pin p;
  p.table_ = this;
  p.region_ = region;
  p.data_ = static_cast<uint8_t*>(it->second.region.base) + offset;
  return p;
}

Result<std::vector<Pin>> AccessTable::pin_sources(const BatchRequest& req) {
  std::vector<Pin> pins;
  pins.reserve(req.writes.size());
  for (const WriteOp& w : req.writes) {
    if (w.length == 0) return invalid_argument("write of 0 bytes for room " + std::to_string(req.room));
    if (w.remote_offset > UINT64_MAX - w.length) return invalid_argument("remote offset + length wraps");
    PDS_ASSIGN_OR_RETURN(Pin p, pin_source(w.local_region, w.local_offset, w.length));
    pins.push_back(std::move(p));
  }
  return pins;
}

Status AccessTable::covered(const RegionEntry& e, RoomId room, Generation gen, uint64_t offset, uint64_t length) const {
  uint64_t end = offset + length;  // caller checked it does not wrap
  // Walk adjacent grants of this room (pages granted one by one, written as one run).
  auto it = e.grants.upper_bound(offset);
  if (it == e.grants.begin()) return invalid_argument("write " + range_str(offset, length) + " not granted to room " + std::to_string(room));
  --it;
  uint64_t pos = offset;
  while (true) {
    if (it == e.grants.end() || it->first > pos || it->second.end <= pos || it->second.room != room)
      return invalid_argument("write " + range_str(offset, length) + " into '" + e.region.name + "' not granted to room " +
                              std::to_string(room));
    if (it->second.gen != gen)
      return invalid_argument("write for room " + std::to_string(room) + " carries generation " + std::to_string(gen) +
                              ", granted generation is " + std::to_string(it->second.gen));
    pos = it->second.end;
    if (pos >= end) return Status::ok();
    ++it;
  }
}

Result<Pin> AccessTable::admit_write(RoomId room, Generation gen, RegionId region, uint64_t offset, uint64_t length) {
  std::lock_guard lk(mu_);
  auto it = regions_.find(region);
  if (it == regions_.end()) return not_found("write into unregistered region " + std::to_string(region));
  uint64_t end;
  if (length == 0 || !range_end(offset, length, &end) || end > it->second.region.size)
    return out_of_range("write " + range_str(offset, length) + " outside region '" + it->second.region.name + "' of " +
                        std::to_string(it->second.region.size) + " bytes");
  auto room_it = rooms_.find(room);
  if (room_it == rooms_.end()) return invalid_argument("room " + std::to_string(room) + " holds no grant");
  if (room_it->second.failed) return Status(ErrorCode::kAborted, "room " + std::to_string(room) + " has failed");
  PDS_RETURN_IF_ERROR(covered(it->second, room, gen, offset, length));
  ++it->second.inflight;
  ++room_it->second.inflight;
  Pin p;
  p.table_ = this;
  p.region_ = region;
  p.has_room_ = true;
  p.room_ = room;
  p.data_ = static_cast<uint8_t*>(it->second.region.base) + offset;
  return p;
}

Status AccessTable::admit_notify(RoomId room, Generation gen) {
  std::lock_guard lk(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end() || it->second.grants.empty()) return invalid_argument("notification for room " + std::to_string(room) + " which holds no grant");
  if (it->second.failed) return Status(ErrorCode::kAborted, "room " + std::to_string(room) + " has failed");
  for (auto [region, start] : it->second.grants) {
    const GrantRange& g = regions_.at(region).grants.at(start);
    if (g.gen != gen)
      return invalid_argument("notification for room " + std::to_string(room) + " carries generation " + std::to_string(gen) +
                              ", granted generation is " + std::to_string(g.gen));
  }
  return Status::ok();
}

bool AccessTable::fail_room(RoomId room) {
  std::lock_guard lk(mu_);
  // Only rooms this side granted can fail: a peer naming random rooms must not grow the map.
  auto it = rooms_.find(room);
  if (it == rooms_.end()) return false;
  const bool first = !it->second.failed;
  it->second.failed = true;
  return first;
}

bool AccessTable::room_failed(RoomId room) const {
  std::lock_guard lk(mu_);
  auto it = rooms_.find(room);
  return it != rooms_.end() && it->second.failed;
}

void AccessTable::unpin(RegionId region, bool has_room, RoomId room) {
  std::lock_guard lk(mu_);
  --regions_.at(region).inflight;
  if (has_room) --rooms_.at(room).inflight;
  idle_.notify_all();
}

}  // namespace pdserve::transfer
