#include "health.h"

#include <httplib.h>

#include <chrono>

namespace pdserve::router {

void HealthChecker::start() {
  for (const auto& w : workers_) threads_.emplace_back([this, w] { loop(w); });
}

void HealthChecker::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void HealthChecker::loop(const std::shared_ptr<Worker>& w) {
  const auto interval = std::chrono::duration<double>(cfg_.interval_s);
  std::unique_lock lk(mu_);
  while (!stop_) {
    if (cv_.wait_for(lk, interval, [&] { return stop_; })) break;
    lk.unlock();
    check_once(*w);
    lk.lock();
  }
}

void HealthChecker::check_once(Worker& w) {
  // A fresh connection each time: a check should prove the worker still accepts connections.
  httplib::Client cli(w.addr().host, w.addr().port);
  const auto t = std::chrono::duration<double>(cfg_.timeout_s);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t).count();
  cli.set_connection_timeout(us / 1000000, us % 1000000);
  cli.set_read_timeout(us / 1000000, us % 1000000);
  cli.set_write_timeout(us / 1000000, us % 1000000);
  auto res = cli.Get(cfg_.path);
  if (res && res->status == 200) {
    w.record_check(true, false, "", cfg_);
    return;
  }
  std::string error;
  bool timed_out = false;
  if (res) {
    error = "GET " + cfg_.path + " returned " + std::to_string(res->status);
  } else {
    timed_out = res.error() == httplib::Error::Read || res.error() == httplib::Error::ConnectionTimeout;
    error = "GET " + cfg_.path + ": " + httplib::to_string(res.error());
  }
  w.record_check(false, timed_out, error, cfg_);
}

}  // namespace pdserve::router
