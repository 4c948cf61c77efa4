#include "pdserve/bench/config.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

namespace pdserve::bench {

const char* dataset_name(DatasetKind d) {
  switch (d) {
    case DatasetKind::kRandomIds: return "random-ids";
    case DatasetKind::kRandom: return "random";
    case DatasetKind::kJsonl: return "jsonl";
  }
  return "?";
}

const char* endpoint_name(EndpointKind e) {
  return e == EndpointKind::kChat ? "chat" : "completions";
}

Result<DatasetKind> parse_dataset(const std::string& s) {
  if (s == "random-ids") return DatasetKind::kRandomIds;
  if (s == "random") return DatasetKind::kRandom;
  if (s == "jsonl") return DatasetKind::kJsonl;
  return invalid_argument("unknown dataset '" + s + "' (random-ids, random, jsonl)");
}

Result<EndpointKind> parse_endpoint(const std::string& s) {
  if (s == "completions") return EndpointKind::kCompletions;
  if (s == "chat") return EndpointKind::kChat;
  return invalid_argument("unknown endpoint '" + s + "' (completions, chat)");
}

const char* chunk_check_name(ChunkCheck c) { return c == ChunkCheck::kExact ? "exact" : "at-most"; }

Result<ChunkCheck> parse_chunk_check(const std::string& s) {
  if (s == "at-most") return ChunkCheck::kAtMost;
  if (s == "exact") return ChunkCheck::kExact;
  return invalid_argument("unknown chunk check '" + s + "' (at-most, exact)");
}

Status BenchConfig::validate() const {
  if (base_url.rfind("http://", 0) != 0 && base_url.rfind("https://", 0) != 0)
    return invalid_argument("--base-url must start with http:// or https://, got '" + base_url + "'");
  if (num_prompts < 1) return invalid_argument("--num-prompts must be at least 1 (zero requests measure nothing)");
  if (concurrency < 1) return invalid_argument("--concurrency must be at least 1");
  if (warmup < 0) return invalid_argument("--warmup must be >= 0");
  if (output_len < 1) return invalid_argument("--output-len must be at least 1");
  if (!(request_rate >= 0.0) || std::isinf(request_rate))
    return invalid_argument("--request-rate must be a finite number >= 0 (0 = no rate limit)");
  if (!(range_ratio >= 0.0 && range_ratio <= 1.0)) return invalid_argument("--range-ratio must be in [0, 1]");
  if (dataset == DatasetKind::kJsonl) {
    if (dataset_path.empty()) return invalid_argument("--dataset jsonl needs --dataset-path");
  } else {
    if (!dataset_path.empty()) return invalid_argument("--dataset-path is only used with --dataset jsonl");
    if (input_len < 1) return invalid_argument("--input-len must be at least 1");
    if (vocab_size < 2) return invalid_argument("--vocab-size must be at least 2");
    // Token-id prompts have no text form, and chat messages need text.
    if (endpoint == EndpointKind::kChat)
      return invalid_argument(std::string("--dataset ") + dataset_name(dataset) +
                              " sends token ids, which only --endpoint completions accepts");
  }
  if (out_dir.empty()) return invalid_argument("--out is required");
  if (!(connect_timeout_s > 0 && read_timeout_s > 0)) return invalid_argument("timeouts must be positive");
  return Status::ok();
}

std::string format_token_count(int64_t n) {
  if (n >= 1024 && n % 1024 == 0) return std::to_string(n / 1024) + "K";
  return std::to_string(n);
}

std::string default_case_name(const BenchConfig& c) {
  std::string in = c.dataset == DatasetKind::kJsonl ? std::string("jsonl") : format_token_count(c.input_len);
  std::string name = in + " -> " + format_token_count(c.output_len) + ", C" + std::to_string(c.concurrency);
  if (c.request_rate > 0) {
    char rate[32];
    std::snprintf(rate, sizeof rate, "%g", c.request_rate);
    name += std::string(", ") + rate + " req/s";
  }
  if (!c.stream) name += ", non-streaming";
  return name;
}

BenchConfig BenchConfig::resolved() const {
  BenchConfig c = *this;
  if (c.run_id.empty()) {
    std::filesystem::path p(c.out_dir);
    if (!p.has_filename()) p = p.parent_path();
    c.run_id = p.filename().string();
  }
  if (c.case_name.empty()) c.case_name = default_case_name(c);
  return c;
}

Json BenchConfig::to_json() const {
  return Json{{"base_url", base_url},
              {"endpoint", endpoint_name(endpoint)},
              {"model", model},
              {"api_key", api_key.empty() ? "" : "<redacted>"},
              {"dataset", dataset_name(dataset)},
              {"dataset_path", dataset_path},
              {"input_len", input_len},
              {"output_len", output_len},
              {"range_ratio", range_ratio},
              {"vocab_size", vocab_size},
              {"seed", seed},
              {"num_prompts", num_prompts},
              {"concurrency", concurrency},
              {"request_rate", request_rate},
              {"warmup", warmup},
              {"stream", stream},
              {"chunk_check", chunk_check_name(chunk_check)},
              {"out_dir", out_dir},
              {"run_id", run_id},
              {"case_name", case_name},
              {"connect_timeout_s", connect_timeout_s},
              {"read_timeout_s", read_timeout_s}};
}

}  // namespace pdserve::bench
