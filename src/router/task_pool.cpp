#include "task_pool.h"

namespace pdserve::router {

void TaskPool::enqueue(std::function<void()> fn) {
  std::lock_guard lk(mu_);
  if (stop_) return;
  jobs_.push_back(std::move(fn));
  // Spawn only when every thread is busy; a queued job would otherwise wait behind a stream.
  if (idle_ < jobs_.size() && threads_.size() < max_threads_) threads_.emplace_back([this] { loop(); });
  cv_.notify_one();
}

void TaskPool::loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
    --idle_;
    if (jobs_.empty()) return;  // stop_ and drained
    auto fn = std::move(jobs_.front());
    jobs_.pop_front();
    lk.unlock();
    fn();
    lk.lock();
  }
}

void TaskPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : threads) t.join();
}

size_t TaskPool::threads() const {
  std::lock_guard lk(mu_);
  return threads_.size();
}

}  // namespace pdserve::router
