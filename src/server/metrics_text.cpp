// Prometheus text exposition (version 0.0.4) of the engine's counters, gauges and histograms.
#include <sstream>

#include "handlers.h"

namespace pdserve::server {

namespace {

void scalar(std::ostringstream& o, const char* name, const char* type, const char* help, double v) {
  o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n' << name << ' ' << v << '\n';
}

void histogram(std::ostringstream& o, const char* name, const char* help, const runtime::HistogramSnapshot& h) {
  o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cum += h.counts[i];
    o << name << "_bucket{le=\"" << h.bounds[i] << "\"} " << cum << '\n';
  }
  cum += h.counts.back();
  o << name << "_bucket{le=\"+Inf\"} " << cum << '\n' << name << "_sum " << h.sum << '\n' << name << "_count " << h.count << '\n';
}

}  // namespace

std::string render_metrics(const runtime::EngineStats& s, const runtime::MetricsSnapshot& m) {
  std::ostringstream o;
  o.precision(10);
  scalar(o, "pdserve_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", static_cast<double>(m.prompt_tokens));
  scalar(o, "pdserve_generation_tokens_total", "counter", "Generated tokens.", static_cast<double>(m.generation_tokens));
  o << "# HELP pdserve_request_finished_total Finished requests by reason.\n# TYPE pdserve_request_finished_total counter\n";
  o << "pdserve_request_finished_total{reason=\"stop\"} " << m.requests_stop << '\n';
  o << "pdserve_request_finished_total{reason=\"length\"} " << m.requests_length << '\n';
  o << "pdserve_request_finished_total{reason=\"abort\"} " << m.requests_abort << '\n';
  o << "pdserve_request_finished_total{reason=\"error\"} " << m.requests_error << '\n';
  scalar(o, "pdserve_request_rejected_total", "counter", "Requests refused at submit (too long, queue full).",
         static_cast<double>(m.requests_rejected));
  scalar(o, "pdserve_num_requests_running", "gauge", "Requests holding pages and a KDA slot.", static_cast<double>(s.running));
  scalar(o, "pdserve_num_requests_waiting", "gauge", "Requests waiting for admission.", static_cast<double>(s.waiting));
  scalar(o, "pdserve_kv_pages_used", "gauge", "MLA KV pages in use.", static_cast<double>(s.pages_used));
  scalar(o, "pdserve_kv_pages_total", "gauge", "MLA KV pages in the pool.", static_cast<double>(s.pages_total));
  scalar(o, "pdserve_kv_usage_ratio", "gauge", "Fraction of MLA KV pages in use.",
         s.pages_total ? static_cast<double>(s.pages_used) / static_cast<double>(s.pages_total) : 0.0);
  scalar(o, "pdserve_kda_slots_used", "gauge", "KDA state slots in use.", static_cast<double>(s.slots_used));
  scalar(o, "pdserve_kda_slots_total", "gauge", "KDA state slots in the pool.", static_cast<double>(s.slots_total));
  scalar(o, "pdserve_engine_steps_total", "counter", "Forward steps run.", static_cast<double>(s.steps));
  histogram(o, "pdserve_time_to_first_token_seconds", "Time from arrival to the first token.", m.ttft);
  histogram(o, "pdserve_inter_token_latency_seconds", "Time between consecutive tokens of a request.", m.itl);
  histogram(o, "pdserve_e2e_request_latency_seconds", "Time from arrival to finish.", m.e2e);
  return o.str();
}

}  // namespace pdserve::server

namespace pdserve::server {

std::string render_pd_metrics(const std::string& role, const disagg::PdMetricsSnapshot& m) {
  std::ostringstream o;
  o.precision(10);
  const std::string p = "pdserve_" + role + "_";
  auto scalar = [&o](const std::string& name, const char* type, const char* help, double v) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n' << name << ' ' << v << '\n';
  };
  scalar(p + "transfer_queue_rooms", "gauge", "Rooms whose KV transfer has started and not ended.",
         static_cast<double>(m.rooms_in_flight));
  scalar(p + "transfer_succeeded_total", "counter", "Rooms whose KV transfer succeeded.", static_cast<double>(m.rooms_succeeded));
  scalar(p + "transfer_failed_total", "counter", "Rooms whose KV transfer failed.", static_cast<double>(m.rooms_failed));
  scalar(p + "transfer_bytes_total", "counter", "Bytes of KV, state and aux rows moved.", static_cast<double>(m.bytes));
  scalar(p + "transfer_seconds_total", "counter", "Sum over rooms of first write to last.", m.transfer_seconds);
  scalar(p + "transfer_max_room_seconds", "gauge", "Longest transfer of one room.", m.max_room_seconds);
  scalar(p + "transfer_gb_per_second", "gauge", "Bytes over transfer time, all rooms.", m.gb_per_s());
  scalar(p + "transfer_runs_total", "counter", "Write operations (contiguous runs) that carried the bytes.",
         static_cast<double>(m.runs));
  // Per peer, labelled by its address (prefill: decode's transfer address; decode: prefill's
  // bootstrap address). Peers are the configured cluster, so the label set stays small.
  auto per_peer = [&](const std::string& name, const char* type, const char* help, auto value) {
    if (m.peers.empty()) return;
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
    for (const auto& [peer, t] : m.peers) o << name << "{peer=\"" << peer << "\"} " << value(t) << '\n';
  };
  using Peer = disagg::PeerTransferTotals;
  per_peer(p + "peer_transfer_bytes_total", "counter", "Bytes moved with one peer.", [](const Peer& t) { return static_cast<double>(t.bytes); });
  per_peer(p + "peer_transfer_rooms_total", "counter", "Rooms that ended ok with one peer.",
           [](const Peer& t) { return static_cast<double>(t.rooms_ok); });
  per_peer(p + "peer_transfer_failed_total", "counter", "Rooms that failed with one peer.",
           [](const Peer& t) { return static_cast<double>(t.rooms_failed); });
  per_peer(p + "peer_transfer_seconds_total", "counter", "Transfer time of ok rooms with one peer.", [](const Peer& t) { return t.seconds; });
  return o.str();
}

}  // namespace pdserve::server
