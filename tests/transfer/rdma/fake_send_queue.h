// A SendQueue without a device: records what was posted, completes it when the test says,
// optionally refuses posts. Posted writes complete in order, as on one RC QP.
#pragma once

#include <deque>
#include <vector>

#include "pdserve/transfer/rdma/send_queue.h"

namespace pdserve::transfer::rdma::testing {

class FakeSendQueue final : public SendQueue {
 public:
  Status post(const RdmaWrite& w) override {
    if (refuse_posts) return Status(ErrorCode::kUnavailable, "fake: queue refuses posts");
    all.push_back(w);
    in_flight.push_back(w);
    return Status::ok();
  }
  int poll(WorkCompletion* out, int max) override {
    int n = 0;
    while (n < max && !ready.empty()) {
      out[n++] = ready.front();
      ready.pop_front();
    }
    return n;
  }
  // The oldest `n` posted writes complete (with an error from the `fail_from`-th on, as a
  // QP in error flushes everything after the failed one).
  void complete(size_t n, size_t fail_from = SIZE_MAX) {
    for (size_t i = 0; i < n && !in_flight.empty(); ++i) {
      const bool ok = i < fail_from;
      ready.push_back({in_flight.front().wr_id, ok, ok ? "" : (i == fail_from ? "remote access error" : "flushed")});
      in_flight.pop_front();
    }
  }
  void complete_all() { complete(in_flight.size()); }

  std::vector<RdmaWrite> all;         // every write ever posted, in order
  std::deque<RdmaWrite> in_flight;    // posted, not completed
  std::deque<WorkCompletion> ready;   // completed, not polled
  bool refuse_posts = false;
};

}  // namespace pdserve::transfer::rdma::testing
