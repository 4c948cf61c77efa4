#include "pdserve/transfer/rdma/write_poster.h"

#include <algorithm>
#include <map>
#include <string>

namespace pdserve::transfer::rdma {

namespace {
constexpr ConnEvent kBringUp[] = {ConnEvent::kStart, ConnEvent::kExchanged, ConnEvent::kToRtr, ConnEvent::kToRts};

bool inside(uint64_t offset, uint64_t length, uint64_t size) { return offset <= size && length <= size - offset; }

// [offset, offset + length) of region lies inside the union of the room's grants there.
bool granted(const std::vector<Grant>& grants, RoomId room, Generation gen, RegionId region, uint64_t offset, uint64_t length) {
  std::map<uint64_t, uint64_t> ranges;  // start -> end
  for (const Grant& g : grants)
    if (g.room == room && g.generation == gen && g.region == region && g.length > 0) ranges[g.offset] = std::max(ranges[g.offset], g.offset + g.length);
  uint64_t at = offset;
  const uint64_t end = offset + length;
  for (const auto& [start, stop] : ranges) {
    if (start > at) break;
    at = std::max(at, stop);
    if (at >= end) return true;
  }
  return at >= end;
}
}  // namespace

std::optional<Status> RdmaBatch::poll() const {
  std::lock_guard lk(mu_);
  return final_;
}

Status RdmaBatch::wait(Clock::time_point deadline) const {
  std::unique_lock lk(mu_);
  if (!cv_.wait_until(lk, deadline, [&] { return final_.has_value(); }))
    return Status(ErrorCode::kDeadlineExceeded, "rdma batch for room " + std::to_string(room_) + " still in flight");
  return *final_;
}

void RdmaBatch::publish(Status st) {
  std::lock_guard lk(mu_);
  if (!final_) final_ = std::move(st);
  cv_.notify_all();
}

WritePoster::WritePoster(std::vector<SendQueue*> lanes, PeerKeys keys, int max_outstanding)
    : keys_(std::move(keys)), max_outstanding_(std::max(1, max_outstanding)), lanes_(lanes.size()) {
  for (size_t i = 0; i < lanes.size(); ++i) {
    lanes_[i].queue = lanes[i];
    for (ConnEvent e : kBringUp) (void)lanes_[i].conn.on(e);  // given connected
  }
}

Result<RdmaWrite> WritePoster::to_wr(const WriteOp& op, int lane) const {
  auto l = keys_.local.find(op.local_region);
  auto r = keys_.remote.find(op.remote_region);
  if (l == keys_.local.end()) return invalid_argument("local region " + std::to_string(op.local_region) + " is not registered for RDMA");
  if (r == keys_.remote.end()) return invalid_argument("the peer registered no region " + std::to_string(op.remote_region));
  if (!inside(op.local_offset, op.length, l->second.size))
    return invalid_argument("write leaves local region " + std::to_string(op.local_region));
  if (!inside(op.remote_offset, op.length, r->second.size))
    return invalid_argument("write leaves the peer's region " + std::to_string(op.remote_region));
  if (op.length > UINT32_MAX) return invalid_argument("one RDMA write is at most 4 GiB - 1 (plan with max_wr_bytes)");
  if (static_cast<size_t>(lane) >= l->second.keys.size() || static_cast<size_t>(lane) >= r->second.keys.size())
    return invalid_argument("no memory key for NIC " + std::to_string(lane));
  RdmaWrite w;
  w.local_addr = l->second.addr + op.local_offset;
  w.lkey = l->second.keys[lane];
  w.remote_addr = r->second.addr + op.remote_offset;
  w.rkey = r->second.keys[lane];
  w.length = static_cast<uint32_t>(op.length);
  return w;
}

Result<std::shared_ptr<TransferBatch>> WritePoster::submit(RoomId room, Generation gen, const StripePlan& plan,
                                                           const std::vector<Grant>& grants, std::optional<WriteOp> completion,
                                                           uint32_t imm, std::vector<Pin> pins, int tag) {
  auto b = std::make_shared<RdmaBatch>();
  b->room_ = room;
  b->gen_ = gen;
  b->tag_ = tag;
  b->submitted_ = Clock::now();
  std::vector<std::pair<int, RdmaWrite>> wrs;
  for (const StripedWrite& s : plan.wrs) {
    if (s.nic < 0 || static_cast<size_t>(s.nic) >= lanes_.size()) return invalid_argument("plan names NIC " + std::to_string(s.nic));
    PDS_ASSIGN_OR_RETURN(RdmaWrite w, to_wr(s.op, s.nic));
    if (!granted(grants, room, gen, s.op.remote_region, s.op.remote_offset, s.op.length))
      return invalid_argument("write to region " + std::to_string(s.op.remote_region) + " offset " + std::to_string(s.op.remote_offset) +
                              " +" + std::to_string(s.op.length) + " is outside room " + std::to_string(room) + "'s grants");
    wrs.push_back({s.nic, w});
    b->bytes_ += s.op.length;
  }
  if (completion) {
    PDS_ASSIGN_OR_RETURN(RdmaWrite w, to_wr(*completion, 0));
    if (!granted(grants, room, gen, completion->remote_region, completion->remote_offset, completion->length))
      return invalid_argument("the completion write is outside room " + std::to_string(room) + "'s grants");
    w.imm = imm;
    b->completion_ = w;
  }
  std::lock_guard lk(mu_);
  if (!blocked_.is_ok()) return blocked_;
  b->pins_ = std::move(pins);
  room_inflight_[room]++;
  b->remaining_ = static_cast<int>(wrs.size());
  for (auto& [lane, w] : wrs) {
    w.wr_id = next_wr_id_++;
    lanes_[lane].waiting.push_back({b, w});
  }
  order_.push_back(b);
  if (b->remaining_ == 0 && b->completion_) {
    b->data_done_ = true;
  } else if (b->remaining_ == 0) {
    finish_locked(b, Status::ok());
  }
  release_completions_locked();
  for (size_t i = 0; i < lanes_.size(); ++i) pump_locked(static_cast<int>(i));
  return std::shared_ptr<TransferBatch>(b);
}

void WritePoster::pump_locked(int lane) {
  Lane& l = lanes_[lane];
  while (conn_can_post(l.conn.state()) && !l.waiting.empty() && static_cast<int>(l.posted.size()) < max_outstanding_) {
    auto [b, w] = l.waiting.front();
    l.waiting.pop_front();
    if (b->done_) continue;  // failed on another lane: its remaining writes are dropped
    if (Status st = l.queue->post(w); !st.is_ok()) {
      l.waiting.push_front({b, w});  // so lane_error_locked fails it with the rest
      return lane_error_locked(lane, st.with_context("post on NIC " + std::to_string(lane)));
    }
    l.posted[w.wr_id] = b;
  }
}

int WritePoster::progress(int lane) {
  WorkCompletion wc[32];
  std::lock_guard lk(mu_);
  Lane& l = lanes_[lane];
  const int n = l.queue->poll(wc, 32);
  for (int i = 0; i < n; ++i) {
    auto it = l.posted.find(wc[i].wr_id);
    if (it == l.posted.end()) continue;  // flushed work of a batch that already failed
    std::shared_ptr<RdmaBatch> b = it->second;
    l.posted.erase(it);
    if (!wc[i].ok) {
      const Status why(ErrorCode::kUnavailable, "RDMA write on NIC " + std::to_string(lane) + " failed: " + wc[i].error);
      if (l.conn.state() != ConnState::kError) finish_locked(b, why);  // the first error: its batch fails with it
      lane_error_locked(lane, why);
      continue;
    }
    if (b->done_) continue;
    if (b->remaining_ > 0 && --b->remaining_ > 0) continue;
    if (b->completion_) {
      b->data_done_ = true;  // every data write landed: the notification may go (in room order)
    } else {
      finish_locked(b, Status::ok());
    }
  }
  release_completions_locked();
  pump_locked(lane);
  return n;
}

void WritePoster::lane_error_locked(int lane, const Status& why) {
  Lane& l = lanes_[lane];
  auto step = l.conn.on(ConnEvent::kCompletionError);
  if (blocked_.is_ok()) blocked_ = Status(ErrorCode::kUnavailable, why.message() + "; the peer is blocked until it re-registers");
  if (!step.is_ok() || !step->fail_inflight) return;
  for (auto& [id, b] : l.posted) finish_locked(b, why);
  for (auto& [b, w] : l.waiting) finish_locked(b, why);
  l.waiting.clear();
  // posted stays: the flushed completions still come and find their batches failed.
}

void WritePoster::finish_locked(const std::shared_ptr<RdmaBatch>& b, Status st) {
  if (b->done_) return;
  b->done_ = true;
  b->pins_.clear();  // from here on no byte of the source is read (a QP in error reads nothing)
  if (auto at = std::find(order_.begin(), order_.end(), b); at != order_.end()) order_.erase(at);
  if (!st.is_ok()) {
    // Later batches of the room must not notify success over this one.
    const std::vector<std::shared_ptr<RdmaBatch>> later(order_.begin(), order_.end());
    for (const auto& o : later)
      if (o->room_ == b->room_ && !o->done_ && o->completion_)
        finish_locked(o, Status(ErrorCode::kAborted, "an earlier batch of room " + std::to_string(b->room_) + " failed: " + st.message()));
  }
  if (on_finish_) on_finish_(b->tag_, b->room_, b->gen_, st, b->bytes_, b->submitted_);
  auto it = room_inflight_.find(b->room_);
  if (it != room_inflight_.end() && --it->second <= 0) {
    room_inflight_.erase(it);
    room_idle_.notify_all();
  }
  b->publish(std::move(st));
}

void WritePoster::release_completions_locked() {
  std::unordered_map<RoomId, bool> busy;  // an earlier unfinished batch of the room exists
  // A copy: posting may fail a lane, and failing batches edits order_.
  const std::vector<std::shared_ptr<RdmaBatch>> order(order_.begin(), order_.end());
  for (const auto& b : order) {
    if (!b->done_ && b->data_done_ && b->completion_ && !busy[b->room_]) {
      if (!conn_can_post(lanes_[b->completion_lane_].conn.state())) {
        // The notification's NIC failed after this batch's data landed elsewhere: it cannot
        // notify, so it fails rather than waiting on a dead queue.
        finish_locked(b, blocked_.is_ok() ? Status(ErrorCode::kUnavailable, "the notification's NIC is not connected") : blocked_);
        continue;
      }
      RdmaWrite c = *b->completion_;
      b->completion_.reset();
      c.wr_id = next_wr_id_++;
      lanes_[b->completion_lane_].waiting.push_back({b, c});
      pump_locked(b->completion_lane_);
    }
    busy[b->room_] = true;
  }
}

void WritePoster::set_finish_hook(FinishHook hook) {
  std::lock_guard lk(mu_);
  on_finish_ = std::move(hook);
}

void WritePoster::wait_room_idle(RoomId room) {
  std::unique_lock lk(mu_);
  room_idle_.wait(lk, [&] { return !room_inflight_.count(room); });
}

Status WritePoster::blocked() const {
  std::lock_guard lk(mu_);
  return blocked_;
}

Status WritePoster::reconnect(int lane, SendQueue* fresh) {
  std::lock_guard lk(mu_);
  if (lane < 0 || static_cast<size_t>(lane) >= lanes_.size()) return invalid_argument("no lane " + std::to_string(lane));
  Lane& l = lanes_[lane];
  PDS_RETURN_IF_ERROR(l.conn.on(ConnEvent::kPeerReregistered).status());
  for (ConnEvent e : kBringUp) PDS_RETURN_IF_ERROR(l.conn.on(e).status());
  l.queue = fresh;
  l.posted.clear();  // the old QP is gone with its flushed work
  if (std::none_of(lanes_.begin(), lanes_.end(), [](const Lane& x) { return x.conn.state() == ConnState::kError; }))
    blocked_ = Status::ok();
  return Status::ok();
}

void WritePoster::close(const Status& why) {
  std::lock_guard lk(mu_);
  blocked_ = why;
  // Batches waiting for their room's earlier batch sit in no lane queue: fail them too.
  for (const auto& b : std::vector<std::shared_ptr<RdmaBatch>>(order_.begin(), order_.end())) finish_locked(b, why);
  for (Lane& l : lanes_) {
    (void)l.conn.on(ConnEvent::kClose);
    for (auto& [id, b] : l.posted) finish_locked(b, why);
    for (auto& [b, w] : l.waiting) finish_locked(b, why);
    l.posted.clear();
    l.waiting.clear();
  }
}

ConnState WritePoster::lane_state(int lane) const {
  std::lock_guard lk(mu_);
  return lanes_[lane].conn.state();
}

size_t WritePoster::posted(int lane) const {
  std::lock_guard lk(mu_);
  return lanes_[lane].posted.size();
}

}  // namespace pdserve::transfer::rdma
