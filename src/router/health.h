// Active health checks: one thread per worker sends GET health.path every interval and feeds
// the result to Worker::record_check, which applies the failure / success thresholds.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "pdserve/router/config.h"
#include "worker.h"

namespace pdserve::router {

class HealthChecker {
 public:
  HealthChecker(HealthConfig cfg, std::vector<std::shared_ptr<Worker>> workers)
      : cfg_(std::move(cfg)), workers_(std::move(workers)) {}
  ~HealthChecker() { stop(); }

  void start();
  void stop();

 private:
  void loop(const std::shared_ptr<Worker>& w);
  void check_once(Worker& w);

  HealthConfig cfg_;
  std::vector<std::shared_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

}  // namespace pdserve::router
