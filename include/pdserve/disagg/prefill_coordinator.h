// The prefill role's half of a room: the bootstrap server, the rooms' targets, and the
// engine hooks that write each finished chunk's pages, then the KDA state, the aux row and
// the notification into decode's pools.
//
//   HTTP handler: await_target(room) -> submit(kPrefillOnly) -> wait -> reply
//   decode:       POST /target (room's pages, slot, aux row) ... POST /abort
//   engine:       on_chunk_done -> page writes; on_prefill_done -> pages + state + aux + notify
//   watcher:      every batch of the room done -> engine.kv_sent(id, status)
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
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

namespace pdserve::net {
class HttpListener;
}

namespace pdserve::disagg {

class PrefillCoordinator {
 public:
  // Registers every rank's pools with `transport`, installs the engine hooks (call before
  // engine.start()), binds the bootstrap server. Startup errors name the port or region.
  static Result<std::unique_ptr<PrefillCoordinator>> create(const DisaggConfig& cfg, runtime::Engine& engine,
                                                            std::unique_ptr<transfer::Transport> transport,
                                                            const std::string& model_dir);
  ~PrefillCoordinator();
  void stop();

  int bootstrap_port() const { return bootstrap_port_; }
  const KvLayout& layout() const { return layout_; }

  // Blocks until decode's target for `room` arrived (kDeadlineExceeded after the bootstrap
  // timeout, kAborted when decode aborted it, or when `caller_gone` (asked every 100 ms, not
  // under the lock) says the caller hung up: decode may have refused the room without being
  // able to tell this server). Claims the room for this request.
  Status await_target(uint64_t room, const std::vector<int32_t>& prompt, const std::function<bool()>& caller_gone = {});
  // The request will not run after all (submit refused it): forget the room.
  void drop(uint64_t room, const Status& why);

  PdMetricsSnapshot metrics() const { return metrics_.snapshot(); }
  std::vector<RoomRecord> recent_rooms(size_t limit) const { return metrics_.recent(limit); }
  Json info() const;

 private:
  struct Room;
  PrefillCoordinator() = default;
  void install_routes();
  void on_chunk_done(uint64_t id, uint64_t room, const runtime::Sequence& seq);
  void on_prefill_done(uint64_t id, uint64_t room, const runtime::Sequence& seq, const runtime::FirstToken& first);
  void on_release(uint64_t id, uint64_t room, const runtime::Sequence& seq);
  Status send(Room& r, uint64_t id, std::vector<transfer::WriteOp> writes, std::optional<std::string> notify);
  void send_failure_notice(Room& r, std::string notice);
  void fail_room(uint64_t room, const Status& why);  // mu_ held
  void record(const Room& r, bool ok, const std::string& error);  // mu_ held: the room ended
  void watch();
  // POST /selftest: write decode's test pattern through the transport (selftest.h).
  Status run_selftest(const Json& body);

  DisaggConfig cfg_;
  runtime::Engine* engine_ = nullptr;
  std::unique_ptr<transfer::Transport> transport_;
  KvLayout layout_;
  std::vector<AuxRow> aux_;  // one row per slot (registered as kAuxRegion)
  std::map<transfer::RegionId, const uint8_t*> bases_;  // registered regions, for checksums
  uint64_t hash_units(const std::vector<transfer::WriteOp>& units) const;
  int bootstrap_port_ = 0;
  std::unique_ptr<net::HttpListener> http_;
  std::thread http_thread_;
  std::atomic<int> registered_ranks_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, std::unique_ptr<Room>> rooms_;
  bool stopping_ = false;
  std::thread watcher_;
  std::mutex selftest_mu_;  // one self-test at a time (they share a region id)
  PdMetrics metrics_;
};

}  // namespace pdserve::disagg
