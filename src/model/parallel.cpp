#include "pdserve/model/parallel.h"

#include <barrier>
#include <cstring>

namespace pdserve {

namespace {

// Shared by the ranks of one group: each rank publishes a pointer, all wait, each reads the
// others' buffers, all wait again before anyone may reuse its buffer.
struct GroupState {
  explicit GroupState(int n) : size(n), sync(n), ptrs(n, nullptr) {}
  int size;
  std::barrier<> sync;
  std::vector<const float*> ptrs;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<GroupState> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->size; }

  void all_reduce_sum(float* data, int64_t n) override {
    if (g_->size == 1) return;
    std::vector<float> mine(data, data + n);
    g_->ptrs[rank_] = mine.data();
    g_->sync.arrive_and_wait();
    for (int64_t i = 0; i < n; ++i) {
      float s = 0;
      for (int r = 0; r < g_->size; ++r) s += g_->ptrs[r][i];
      data[i] = s;
    }
    g_->sync.arrive_and_wait();
  }

  void all_gather(const float* in, int64_t n, float* out) override {
    g_->ptrs[rank_] = in;
    g_->sync.arrive_and_wait();
    for (int r = 0; r < g_->size; ++r) std::memcpy(out + r * n, g_->ptrs[r], n * sizeof(float));
    g_->sync.arrive_and_wait();
  }

 private:
  std::shared_ptr<GroupState> g_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_in_process_group(int size) {
  auto g = std::make_shared<GroupState>(size);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<InProcessCommunicator>(g, r));
  return out;
}

}  // namespace pdserve
