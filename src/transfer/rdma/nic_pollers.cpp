#include "nic_pollers.h"

#include <chrono>

namespace pdserve::transfer::rdma {

NicPollers::NicPollers(int nics) {
  for (int i = 0; i < nics; ++i) nics_.push_back(std::make_unique<Nic>());
  for (auto& n : nics_) n->thread = std::thread([this, p = n.get()] { loop(p); });
}

uint64_t NicPollers::add(int nic, Work work) {
  const uint64_t id = next_id_++;
  std::lock_guard lk(nics_.at(nic)->mu);
  nics_[nic]->work.emplace(id, std::move(work));
  return id;
}

void NicPollers::remove(int nic, uint64_t id) {
  std::lock_guard lk(nics_.at(nic)->mu);  // waits for a sweep in progress
  nics_[nic]->work.erase(id);
}

void NicPollers::stop() {
  if (stop_.exchange(true)) return;
  for (auto& n : nics_)
    if (n->thread.joinable()) n->thread.join();
}

void NicPollers::loop(Nic* nic) {
  while (!stop_.load()) {
    int handled = 0;
    {
      std::lock_guard lk(nic->mu);
      for (auto& [id, w] : nic->work) handled += w();
    }
    // Busy polling while completions come; a short nap when idle keeps an idle server cheap.
    if (handled == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace pdserve::transfer::rdma
