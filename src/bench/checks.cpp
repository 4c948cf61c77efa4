#include "pdserve/bench/checks.h"

#include <functional>
#include <sstream>

namespace pdserve::bench {
namespace {

// A check returns "" when the record passes, else what went wrong; nullopt = not applicable.
using CheckFn = std::function<std::optional<std::string>(const RequestRecord&)>;

struct CheckDef {
  const char* name;
  const char* description;
  CheckFn fn;
};

std::string n(int64_t v) { return std::to_string(v); }

std::vector<CheckDef> check_defs(ChunkCheck chunk_check) {
  const bool exact = chunk_check == ChunkCheck::kExact;
  return {
      {"completed", "the request got a whole, well-formed response (HTTP 200; [DONE] when streaming)",
       [](const RequestRecord& r) -> std::optional<std::string> { return r.completed ? "" : r.error; }},
      {"usage_reported", "the response reported usage.prompt_tokens and usage.completion_tokens",
       [](const RequestRecord& r) -> std::optional<std::string> {
         if (!r.completed) return std::nullopt;
         if (!r.usage) return std::string("no usage in the response");
         if (r.usage->prompt_tokens < 0 || r.usage->completion_tokens < 0)
           return std::string("usage lacks prompt_tokens or completion_tokens");
         return "";
       }},
      {"output_tokens", "usage.completion_tokens equals max_tokens (ignore_eos makes lengths exact)",
       [](const RequestRecord& r) -> std::optional<std::string> {
         if (!r.completed || !r.usage || r.usage->completion_tokens < 0) return std::nullopt;
         if (r.usage->completion_tokens == r.expected_output_len) return "";
         return "completion_tokens " + n(r.usage->completion_tokens) + ", expected " + n(r.expected_output_len);
       }},
      {"streamed_tokens",
       exact ? "streamed token chunks equal usage.completion_tokens (--chunk-check exact)"
             : "streamed token chunks are no more than usage.completion_tokens (--chunk-check at-most)",
       [exact](const RequestRecord& r) -> std::optional<std::string> {
         if (!r.stream || !r.completed || !r.usage || r.usage->completion_tokens < 0) return std::nullopt;
         const int64_t tokens = r.usage->completion_tokens;
         const bool ok = exact ? r.token_chunks == tokens : r.token_chunks <= tokens;
         if (ok) return "";
         return "streamed " + n(r.token_chunks) + " token chunks, usage says " + n(tokens);
       }},
      {"prompt_tokens", "usage.prompt_tokens equals the number of prompt token ids sent",
       [](const RequestRecord& r) -> std::optional<std::string> {
         if (!r.completed || r.input_len < 0 || !r.usage || r.usage->prompt_tokens < 0) return std::nullopt;
         if (r.usage->prompt_tokens == r.input_len) return "";
         return "prompt_tokens " + n(r.usage->prompt_tokens) + ", sent " + n(r.input_len);
       }},
  };
}

}  // namespace

bool CheckReport::all_passed() const {
  for (const auto& c : checks)
    if (!c.passed()) return false;
  return true;
}

std::string CheckReport::failure_summary(size_t examples_per_check) const {
  std::ostringstream out;
  for (const auto& c : checks) {
    if (c.passed()) continue;
    out << "check " << c.name << " failed for " << c.failed << "/" << c.checked << " requests ("
        << c.description << ")";
    for (size_t i = 0; i < c.failures.size() && i < examples_per_check; ++i) out << "\n  " << c.failures[i];
    if (c.failures.size() > examples_per_check)
      out << "\n  ... and " << c.failures.size() - examples_per_check << " more (see requests.jsonl)";
    out << "\n";
  }
  return out.str();
}

Json CheckReport::to_json() const {
  Json arr = Json::array();
  for (const auto& c : checks)
    arr.push_back(Json{{"name", c.name},
                       {"description", c.description},
                       {"passed", c.passed()},
                       {"checked", c.checked},
                       {"failed", c.failed},
                       {"failures", c.failures}});
  return Json{{"all_passed", all_passed()}, {"checks", arr}};
}

CheckReport run_checks(std::vector<RequestRecord>& records, ChunkCheck chunk_check) {
  CheckReport report;
  for (const auto& def : check_defs(chunk_check)) {
    CheckResult result{def.name, def.description, 0, 0, {}};
    for (auto& r : records) {
      std::optional<std::string> verdict = def.fn(r);
      if (!verdict) continue;
      ++result.checked;
      if (verdict->empty()) continue;
      ++result.failed;
      const std::string what = std::string(r.warmup ? "warm-up " : "") + "request " + n(r.index) + ": " + *verdict;
      result.failures.push_back(what);
      r.check_failures.push_back(std::string(def.name) + ": " + *verdict);
    }
    report.checks.push_back(std::move(result));
  }
  return report;
}

}  // namespace pdserve::bench
