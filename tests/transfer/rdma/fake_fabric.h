// An in-process RDMA "wire" for end-to-end tests of the RDMA transport without a device.
// Two (or more) FakeFabrics share one FakeWire. A posted RDMA WRITE is applied at once the
// way an HCA would: the lkey must name a registration on the posting NIC covering the
// source, the rkey one on the same NIC covering the destination (else a remote access
// error, both QPs go to error); a write-with-immediate consumes one posted receive of the
// remote QP and queues the immediate there. Faults: fail the Nth next write on a NIC
// (a "link" failure: error completion, both QPs in error), or hold completions back.
#pragma once

#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "pdserve/transfer/rdma/fabric.h"

namespace pdserve::transfer::rdma::testing {

class FakeWire {
 public:
  // The write after `ok_writes` more successful ones on `nic` fails (any side).
  void fail_nic_after(int nic, int ok_writes) {
    std::lock_guard lk(mu);
    fail_after[nic] = ok_writes;
  }
  void hold_completions(bool hold);
  uint64_t writes_on(int nic) {
    std::lock_guard lk(mu);
    return per_nic_writes[nic];
  }
  uint64_t bytes_on(int nic) {
    std::lock_guard lk(mu);
    return per_nic_bytes[nic];
  }

  struct Mr {
    uint64_t addr, size;
    int nic;
  };
  std::mutex mu;
  std::map<uint32_t, Mr> mrs;
  uint32_t next_key = 0x1000;
  std::map<uint32_t, class FakeQp*> qps;
  uint32_t next_qpn = 1;
  std::map<int, int> fail_after;
  std::map<int, uint64_t> per_nic_writes, per_nic_bytes;
  bool hold = false;
};

class FakeQp final : public QueuePair {
 public:
  FakeQp(FakeWire* wire, int nic) : wire_(wire), nic_(nic) {
    std::lock_guard lk(wire_->mu);
    qpn_ = wire_->next_qpn++;
    wire_->qps[qpn_] = this;
  }
  ~FakeQp() override {
    std::lock_guard lk(wire_->mu);
    wire_->qps.erase(qpn_);
  }
  QpEndpoint endpoint() const override {
    QpEndpoint e;
    e.qpn = qpn_;
    e.psn = 1;
    e.lid = 1;
    return e;
  }
  Status connect(const QpEndpoint& remote) override {
    std::lock_guard lk(wire_->mu);
    remote_qpn_ = remote.qpn;
    return Status::ok();
  }
  Status post(const RdmaWrite& w) override {
    std::lock_guard lk(wire_->mu);
    if (error_) return Status(ErrorCode::kUnavailable, "fake: QP in error");
    FakeQp* remote = wire_->qps.count(remote_qpn_) ? wire_->qps[remote_qpn_] : nullptr;
    auto fail = [&](const char* why) {
      error_ = true;
      if (remote) remote->error_ = true;
      complete({w.wr_id, false, why});
      return Status::ok();
    };
    if (!remote || remote->error_) return fail("remote QP gone or in error");
    if (!covers(w.lkey, w.local_addr, w.length)) return fail("local protection error");
    auto f = wire_->fail_after.find(nic_);
    if (f != wire_->fail_after.end() && f->second-- == 0) {
      wire_->fail_after.erase(f);
      return fail("transport retry counter exceeded");
    }
    if (!covers(w.rkey, w.remote_addr, w.length)) return fail("remote access error");
    if (w.imm && remote->recvs_ == 0) return fail("RNR retry counter exceeded");
    std::memcpy(reinterpret_cast<void*>(w.remote_addr), reinterpret_cast<const void*>(w.local_addr), w.length);
    wire_->per_nic_writes[nic_]++;
    wire_->per_nic_bytes[nic_] += w.length;
    if (w.imm) {
      remote->recvs_--;
      remote->recv_cq_.push_back({*w.imm, true, ""});
    }
    complete({w.wr_id, true, ""});
    return Status::ok();
  }
  int poll(WorkCompletion* out, int max) override {
    std::lock_guard lk(wire_->mu);
    int n = 0;
    while (n < max && !send_cq_.empty()) {
      out[n++] = send_cq_.front();
      send_cq_.pop_front();
    }
    return n;
  }
  Status post_recv() override {
    std::lock_guard lk(wire_->mu);
    recvs_++;
    return Status::ok();
  }
  int poll_recv(RecvCompletion* out, int max) override {
    std::lock_guard lk(wire_->mu);
    int n = 0;
    while (n < max && !recv_cq_.empty()) {
      out[n++] = recv_cq_.front();
      recv_cq_.pop_front();
    }
    return n;
  }
  void set_error() override {
    std::lock_guard lk(wire_->mu);
    error_ = true;
  }
  void release_held() {  // wire mutex held by the caller
    for (auto& wc : held_) send_cq_.push_back(wc);
    held_.clear();
  }

 private:
  bool covers(uint32_t key, uint64_t addr, uint64_t len) const {
    auto it = wire_->mrs.find(key);
    return it != wire_->mrs.end() && it->second.nic == nic_ && addr >= it->second.addr && len <= it->second.size &&
           addr - it->second.addr <= it->second.size - len;
  }
  void complete(WorkCompletion wc) { (wire_->hold ? held_ : send_cq_).push_back(std::move(wc)); }

  FakeWire* wire_;
  int nic_;
  uint32_t qpn_ = 0, remote_qpn_ = 0;
  bool error_ = false;
  int recvs_ = 0;
  std::deque<WorkCompletion> send_cq_, held_;
  std::deque<RecvCompletion> recv_cq_;
};

inline void FakeWire::hold_completions(bool h) {
  std::lock_guard lk(mu);
  hold = h;
  if (!h)
    for (auto& [qpn, qp] : qps) qp->release_held();
}

class FakeRegistration final : public Registration {
 public:
  FakeRegistration(FakeWire* wire, const MemoryRegion& r, int nics) : wire_(wire) {
    std::lock_guard lk(wire_->mu);
    keys_.addr = reinterpret_cast<uint64_t>(r.base);
    keys_.size = r.size;
    for (int n = 0; n < nics; ++n) {
      const uint32_t key = wire_->next_key++;
      wire_->mrs[key] = {keys_.addr, r.size, n};
      keys_.keys.push_back(key);
    }
  }
  ~FakeRegistration() override {
    std::lock_guard lk(wire_->mu);
    for (uint32_t k : keys_.keys) wire_->mrs.erase(k);
  }
  const MrKeys& keys() const override { return keys_; }

 private:
  FakeWire* wire_;
  MrKeys keys_;
};

class FakeFabric final : public Fabric {
 public:
  FakeFabric(FakeWire* wire, int nics) : wire_(wire), nics_(nics) {}
  int nics() const override { return nics_; }
  std::string describe() const override { return "fake(" + std::to_string(nics_) + " NICs)"; }
  Result<std::unique_ptr<Registration>> register_memory(const MemoryRegion& r) override {
    return std::unique_ptr<Registration>(new FakeRegistration(wire_, r, nics_));
  }
  Result<std::unique_ptr<QueuePair>> create_qp(int nic, int, int) override {
    return std::unique_ptr<QueuePair>(new FakeQp(wire_, nic));
  }

 private:
  FakeWire* wire_;
  int nics_;
};

}  // namespace pdserve::transfer::rdma::testing
