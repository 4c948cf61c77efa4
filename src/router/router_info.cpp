// What the router reports about itself: /get_server_info (JSON) and /metrics (Prometheus).
#include "router_impl.h"

namespace pdserve::router {

Json RouterImpl::server_info() const {
  Json workers = Json::array();
  for (const auto& w : all_) workers.push_back(w->info());
  Json policies = cfg_.mode == RouterMode::kPd
                      ? Json{{"prefill", policy_name(cfg_.prefill_policy)}, {"decode", policy_name(cfg_.decode_policy)}}
                      : Json{{"worker", policy_name(cfg_.dp_policy)}};
  return Json{
      {"role", "router"},
      {"mode", cfg_.mode == RouterMode::kPd ? "pd" : "dp"},
      {"port", port_},
      {"in_flight", in_flight_.load()},
      {"draining", draining_.load()},
      {"worker_api_key", cfg_.worker_api_key.empty() ? "" : "<redacted>"},
      {"max_in_flight", cfg_.max_in_flight},
      {"policies", policies},
      {"health_check",
       {{"interval_s", cfg_.health.interval_s},
        {"timeout_s", cfg_.health.timeout_s},
        {"failure_threshold", cfg_.health.failure_threshold},
        {"success_threshold", cfg_.health.success_threshold},
        {"path", cfg_.health.path}}},
      {"limits",
       {{"max_body_bytes", cfg_.max_body_bytes},
        {"request_timeout_s", cfg_.request_timeout_s},
        {"drain_timeout_s", cfg_.drain_timeout_s},
        {"connect_timeout_s", cfg_.connect_timeout_s},
        {"max_connect_retries", cfg_.max_connect_retries}}},
      {"counters",
       {{"requests", requests_total_.load()},
        {"rejected_at_capacity", rejected_total_.load()},
        {"connect_retries", retries_total_.load()},
        {"bad_requests", bad_requests_total_.load()},
        {"no_healthy_worker", no_worker_total_.load()},
        {"prefill_failures", prefill_failures_total_.load()},
        {"prefill_rooms_aborted", prefill_aborts_total_.load()},
        {"client_gone", client_gone_total_.load()}}},
      {"workers", workers},
  };
}

namespace {

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void scalar(std::string& out, const char* name, const char* type, const char* help, int64_t v) {
  family(out, name, type, help);
  out += std::string(name) + " " + std::to_string(v) + "\n";
}

}  // namespace

std::string RouterImpl::metrics_text() const {
  std::string out;
  scalar(out, "pdserve_router_requests_total", "counter", "Client requests on the generate endpoints.",
         requests_total_.load());
  scalar(out, "pdserve_router_in_flight", "gauge", "Client requests being served now.", in_flight_.load());
  scalar(out, "pdserve_router_rejected_total", "counter", "Requests refused with 503 at max_in_flight.",
         rejected_total_.load());
  scalar(out, "pdserve_router_connect_retries_total", "counter", "Connect failures retried on another worker.",
         retries_total_.load());
  scalar(out, "pdserve_router_bad_requests_total", "counter", "Requests the router refused (400, 401, 413).",
         bad_requests_total_.load());
  scalar(out, "pdserve_router_no_healthy_worker_total", "counter", "Requests with no usable worker to send to.",
         no_worker_total_.load());
  scalar(out, "pdserve_router_prefill_failures_total", "counter", "PD requests failed because prefill failed.",
         prefill_failures_total_.load());
  scalar(out, "pdserve_router_prefill_rooms_aborted_total", "counter",
         "PD rooms the router told prefill to drop because their decode could not be reached.",
         prefill_aborts_total_.load());
  scalar(out, "pdserve_router_client_gone_total", "counter",
         "Non-streaming requests whose client hung up before the answer; the worker calls were cancelled.",
         client_gone_total_.load());

  // Prometheus wants each family's samples together, so iterate families, then workers.
  auto label = [](const Worker& w) { return "worker=\"" + w.url() + "\",role=\"" + role_name(w.role()) + "\""; };
  struct Fam {
    const char* name;
    const char* type;
    const char* help;
    int64_t Worker::Counters::*field;
  };
  static const Fam fams[] = {
      {"pdserve_router_worker_requests_total", "counter", "Calls sent to the worker.", &Worker::Counters::requests},
      {"pdserve_router_worker_errors_total", "counter", "Calls that failed (transport error or HTTP 5xx).",
       &Worker::Counters::errors},
      {"pdserve_router_worker_connect_failures_total", "counter", "Calls that could not connect.",
       &Worker::Counters::connect_failures},
      {"pdserve_router_worker_resends_total", "counter",
       "Calls sent again on a new connection after a pooled one broke before any answer.",
       &Worker::Counters::resends},
      {"pdserve_router_worker_in_flight", "gauge", "Calls on the worker now.", &Worker::Counters::outstanding},
      {"pdserve_router_worker_healthy", "gauge", "1 while the worker is in the rotation.", &Worker::Counters::healthy},
      {"pdserve_router_worker_health_checks_failed_total", "counter", "Failed active health checks.",
       &Worker::Counters::checks_failed},
  };
  std::vector<Worker::Counters> counters;
  for (const auto& w : all_) counters.push_back(w->counters());
  for (const auto& f : fams) {
    family(out, f.name, f.type, f.help);
    for (size_t i = 0; i < all_.size(); ++i)
      out += std::string(f.name) + "{" + label(*all_[i]) + "} " + std::to_string(counters[i].*f.field) + "\n";
  }
  family(out, "pdserve_router_worker_request_duration_seconds", "histogram",
         "Time from sending a call to its last byte.");
  for (const auto& w : all_) w->latency().render(out, "pdserve_router_worker_request_duration_seconds", label(*w));
  return out;
}

}  // namespace pdserve::router
