// A thread pool that grows on demand up to a cap and joins on shutdown.
// httplib's ThreadPool is fixed-size: too small and connections queue behind long streams,
// too large and idle threads are spawned up front. Idle threads are reused.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pdserve::router {

class TaskPool : public httplib::TaskQueue {
 public:
  explicit TaskPool(size_t max_threads) : max_threads_(max_threads) {}
  ~TaskPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override;
  // Runs what is queued, then joins every thread. Safe to call twice.
  void shutdown() override;
  size_t threads() const;

 private:
  void loop();

  const size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stop_ = false;
};

}  // namespace pdserve::router
