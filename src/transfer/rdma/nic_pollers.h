// One completion thread per NIC (internal). Each thread sweeps the work registered for its
// NIC (a sender lane's completions, a receiving QP's immediates) and naps briefly when a
// sweep found nothing. remove() returns only after any sweep running the work has ended, so
// the work's owner may be destroyed afterwards.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace pdserve::transfer::rdma {

class NicPollers {
 public:
  // Work returns how many completions it handled.
  using Work = std::function<int()>;
  explicit NicPollers(int nics);
  ~NicPollers() { stop(); }
  uint64_t add(int nic, Work work);
  void remove(int nic, uint64_t id);
  void stop();

 private:
  struct Nic {
    std::mutex mu;  // held for a whole sweep
    std::map<uint64_t, Work> work;
    std::thread thread;
  };
  void loop(Nic* nic);

  std::vector<std::unique_ptr<Nic>> nics_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace pdserve::transfer::rdma
