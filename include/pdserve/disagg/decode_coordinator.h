// The decode role's half of a room: the prefill layouts (looked up once per bootstrap
// server and checked), the grants, the target handed to prefill, the aux row check that
// turns landed KV into a running request, and every way a room can fail (timeout,
// heartbeat lost, abort, transfer error), each ending with pages and slot freed.
//
//   HTTP handler: prepare(bootstrap, prompt) -> submit(kDecodeOnly) -> stream
//   engine:       on_kv_reserved -> grant + POST /target ; on_release -> revoke (+ /abort)
//   transport:    on_notify -> check aux row -> engine.kv_ready ; on_room_failed -> fail
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "pdserve/disagg/aux_row.h"
#include "pdserve/disagg/bootstrap_messages.h"
#include "pdserve/disagg/disagg_config.h"
#include "pdserve/disagg/pd_metrics.h"
#include "pdserve/runtime/engine.h"
#include "pdserve/runtime/scheduler.h"
#include "pdserve/transfer/transport.h"

namespace pdserve::disagg {

class DecodeCoordinator {
 public:
  static Result<std::unique_ptr<DecodeCoordinator>> create(const DisaggConfig& cfg, runtime::Engine& engine,
                                                           std::unique_ptr<transfer::Transport> transport,
                                                           const std::string& model_dir);
  ~DecodeCoordinator();
  void stop();

  // Before submit: looks up (once) and checks the prefill server's layout, and records the
  // room. kInvalidArgument for a pair that must never run (page size, dtype, model...),
  // kUnavailable when the bootstrap server cannot be reached or is not ready.
  Status prepare(const std::string& host, int port, uint64_t room, const std::vector<int32_t>& prompt);
  // submit() refused the request: forget the room.
  void drop(uint64_t room);
  // This server refused the room (pair check, limits, overload): tell its prefill now, so the
  // prefill half stops waiting for a target that will never come. Best effort, asynchronous.
  void refuse(const std::string& host, int port, uint64_t room, const std::string& why);

  const KvLayout& layout() const { return layout_; }
  // False (with the reason) until every configured prefill peer passed the self-test.
  bool healthy(std::string* why) const;
  PdMetricsSnapshot metrics() const { return metrics_.snapshot(); }
  std::vector<RoomRecord> recent_rooms(size_t limit) const { return metrics_.recent(limit); }
  Json info() const;

 private:
  struct Room;
  struct Prefill;  // one bootstrap server: its layout, heartbeat state, rooms
  DecodeCoordinator() = default;
  void on_kv_reserved(uint64_t id, uint64_t room, const runtime::Sequence& seq);
  void on_release(uint64_t id, uint64_t room, const runtime::Sequence& seq);
  void on_notify(uint64_t room, const std::string& payload);
  void on_room_failed(uint64_t room, const Status& why);
  void post(std::function<void()> job);  // runs on the worker thread
  void work();
  void heartbeat();
  void selftests();                                   // thread: until every peer passed
  Status run_selftest(Prefill& p);                    // mu_ not held
  Status lookup_layout(const std::shared_ptr<Prefill>& p);  // GET /route + check, mu_ not held
  void fail_room_locked(Room& r, const Status& why);  // mu_ held

  DisaggConfig cfg_;
  runtime::Engine* engine_ = nullptr;
  std::unique_ptr<transfer::Transport> transport_;
  KvLayout layout_;
  std::vector<AuxRow> aux_;
  std::map<transfer::RegionId, const uint8_t*> bases_;  // registered regions, for checksums
  std::atomic<uint32_t> next_generation_{1};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Prefill>> prefills_;  // "host:port"
  std::map<uint64_t, std::unique_ptr<Room>> rooms_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread worker_, heartbeat_, selftest_;
  std::vector<uint8_t> scratch_;  // kSelfTestRegion
  PdMetrics metrics_;
};

}  // namespace pdserve::disagg
