#include "pdserve/bench/bench.h"

#include <filesystem>
#include <ostream>

#include "pdserve/bench/checks.h"
#include "pdserve/bench/client.h"
#include "pdserve/bench/dataset.h"
#include "pdserve/bench/environment.h"
#include "pdserve/bench/runner.h"
#include "pdserve/core/sha256.h"
#include "pdserve/bench/svg_plot.h"
#include "pdserve/core/file_util.h"

namespace pdserve::bench {
namespace {

namespace fs = std::filesystem;

Status prepare_out_dir(const BenchConfig& c) {
  std::error_code ec;
  if (fs::exists(fs::path(c.out_dir) / "summary.json", ec) && !c.overwrite)
    return invalid_argument(c.out_dir + " already holds a run (summary.json); pick another --out or pass --overwrite");
  fs::create_directories(c.out_dir, ec);
  if (ec) return io_error("cannot create " + c.out_dir + ": " + ec.message());
  return Status::ok();
}

Result<std::vector<PreparedRequest>> prepare(const std::vector<BenchPrompt>& prompts, const BenchConfig& c,
                                             const std::string& model, bool warmup) {
  std::vector<PreparedRequest> out;
  out.reserve(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    PreparedRequest p;
    p.record.index = static_cast<int64_t>(i);
    p.record.warmup = warmup;
    p.record.category = prompts[i].category;
    p.record.input_len = prompts[i].known_input_len();
    p.record.expected_output_len = prompts[i].output_len;
    p.record.stream = c.stream;
    auto body = build_request_body(prompts[i], c.endpoint, model, c.stream);
    if (!body.is_ok()) return body.status().with_context("prompt " + std::to_string(i));
    p.body = std::move(body).value();
    out.push_back(std::move(p));
  }
  return out;
}

std::string bodies_jsonl(const std::vector<PreparedRequest>& reqs) {
  std::string s;
  for (const auto& r : reqs) s += r.body + "\n";
  return s;
}

Status write_inputs(const std::string& dir, const std::vector<PreparedRequest>& measured,
                    const std::vector<PreparedRequest>& warmup) {
  const std::string inputs = bodies_jsonl(measured);
  PDS_RETURN_IF_ERROR(write_file(join_path(dir, "inputs.jsonl"), inputs));
  std::string sums = sha256_hex(inputs) + "  inputs.jsonl\n";
  if (!warmup.empty()) {
    const std::string w = bodies_jsonl(warmup);
    PDS_RETURN_IF_ERROR(write_file(join_path(dir, "warmup_inputs.jsonl"), w));
    sums += sha256_hex(w) + "  warmup_inputs.jsonl\n";
  }
  return write_file(join_path(dir, "inputs.sha256"), sums);  // `sha256sum -c inputs.sha256` verifies
}

Json server_info(const std::string& base_url, const ClientOptions& opts) {
  Json info = Json::object();
  auto client = OpenAiClient::create(base_url, opts);
  if (!client.is_ok()) return info;
  for (const char* path : {"/v1/models", "/get_server_info"}) {
    auto j = (*client)->get_json(path);
    if (j.is_ok()) info[path] = *j;
  }
  return info;
}

RequestSample to_sample(const RequestRecord& r) {
  RequestSample s;
  s.start_s = r.start_s;
  s.ttft_s = r.ttft_s;
  s.e2e_s = r.e2e_s;
  s.itl_s = r.itl_s;
  s.streamed = r.stream;
  // The server's counts when it reports them; otherwise what the client knows.
  s.input_tokens = r.usage && r.usage->prompt_tokens >= 0 ? r.usage->prompt_tokens : std::max<int64_t>(0, r.input_len);
  s.output_tokens = r.usage && r.usage->completion_tokens >= 0 ? r.usage->completion_tokens : r.token_chunks;
  return s;
}

Status write_results(const std::string& dir, const RunReport& report, const std::vector<RequestRecord>& records,
                     const std::vector<RequestSample>& samples) {
  std::string lines;
  for (const auto& r : records) lines += r.to_json().dump() + "\n";
  PDS_RETURN_IF_ERROR(write_file(join_path(dir, "requests.jsonl"), lines));
  PDS_RETURN_IF_ERROR(write_file(join_path(dir, "summary.json"), report.summary_json().dump(2) + "\n"));
  PDS_RETURN_IF_ERROR(write_file(join_path(dir, "summary.md"), report.summary_markdown()));
  CdfPanel ttft{"TTFT", "s", {}}, tpot{"TPOT", "ms", {}};
  for (const auto& s : samples) {
    ttft.values.push_back(s.ttft_s);
    if (auto t = tpot_s(s)) tpot.values.push_back(*t * 1e3);
  }
  const std::string title = report.config.run_id + ": " + report.config.case_name;
  return write_file(join_path(dir, "plot.svg"), render_cdf_svg(title, {ttft, tpot}));
}

}  // namespace

Result<BenchOutcome> run_bench(const BenchConfig& cfg_in, const std::vector<std::string>& argv, std::ostream& log) {
  PDS_RETURN_IF_ERROR(cfg_in.validate());
  BenchConfig c = cfg_in.resolved();
  const ClientOptions copts{c.endpoint, c.api_key, c.connect_timeout_s, c.read_timeout_s};

  // Everything that can fail without a server, then the server, then the first file.
  PDS_ASSIGN_OR_RETURN(std::vector<BenchPrompt> prompts, make_prompts(c, c.num_prompts));
  std::vector<BenchPrompt> warm_prompts;
  if (c.warmup > 0) {
    BenchConfig wc = c;
    wc.seed = c.seed ^ 0x5eedULL;  // warm-up prompts differ from the measured ones
    PDS_ASSIGN_OR_RETURN(warm_prompts, make_prompts(wc, c.warmup));
  }
  PDS_ASSIGN_OR_RETURN(std::string listed_model, preflight(c.base_url, copts));
  const std::string model = c.model.empty() ? listed_model : c.model;
  PDS_ASSIGN_OR_RETURN(std::vector<PreparedRequest> measured, prepare(prompts, c, model, false));
  PDS_ASSIGN_OR_RETURN(std::vector<PreparedRequest> warm, prepare(warm_prompts, c, model, true));
  PDS_RETURN_IF_ERROR(prepare_out_dir(c));

  PDS_RETURN_IF_ERROR(write_file(join_path(c.out_dir, "command.txt"), shell_join(argv) + "\n"));
  PDS_RETURN_IF_ERROR(write_inputs(c.out_dir, measured, warm));
  Json env = collect_environment();
  env["cpp_httplib_version"] = http_client_version();
  Json manifest{{"environment", env},
                {"config", c.to_json()},
                {"model", model},
                {"server", server_info(c.base_url, copts)}};
  PDS_RETURN_IF_ERROR(write_file(join_path(c.out_dir, "manifest.json"), manifest.dump(2) + "\n"));

  const LoadOptions load{c.concurrency, c.request_rate, c.seed, c.stream};
  std::vector<RequestRecord> records;
  if (!warm.empty()) {
    log << "bench: " << warm.size() << " warm-up requests\n";
    PhaseResult w = run_phase(c.base_url, copts, LoadOptions{c.concurrency, 0, c.seed, c.stream}, std::move(warm),
                              log, "warm-up");
    records = std::move(w.records);
  }
  log << "bench: " << measured.size() << " requests to " << c.base_url << endpoint_path(c.endpoint) << " at concurrency "
      << c.concurrency << "\n";
  PhaseResult m = run_phase(c.base_url, copts, load, std::move(measured), log, "measured");

  std::vector<RequestSample> samples;
  for (const auto& r : m.records)
    if (r.completed) samples.push_back(to_sample(r));
  records.insert(records.end(), m.records.begin(), m.records.end());

  RunReport report;
  report.config = c;
  report.model = model;
  report.measured = c.num_prompts;
  report.warmup = c.warmup;
  report.checks = run_checks(records, c.chunk_check);
  report.metrics = summarize(samples, m.duration_s);
  PDS_RETURN_IF_ERROR(write_results(c.out_dir, report, records, samples));
  return BenchOutcome{std::move(report), c.out_dir};
}

}  // namespace pdserve::bench
