// One validated configuration for `pdserve bench`. The CLI fills it; validate() is the only
// place that decides what is allowed, so tests and the CLI agree on the rules.
#pragma once

#include <cstdint>
#include <string>

#include "pdserve/core/json_util.h"
#include "pdserve/core/status.h"

namespace pdserve::bench {

enum class DatasetKind { kRandomIds, kRandom, kJsonl };
enum class EndpointKind { kCompletions, kChat };
// How streamed chunks must match usage.completion_tokens. kExact: one chunk per token.
// kAtMost: never more chunks than tokens, because servers may merge tokens into one chunk
// (a detokenizer holding back half a UTF-8 character, or a stream interval above 1).
enum class ChunkCheck { kAtMost, kExact };

const char* dataset_name(DatasetKind d);
const char* endpoint_name(EndpointKind e);
Result<DatasetKind> parse_dataset(const std::string& s);
Result<EndpointKind> parse_endpoint(const std::string& s);
const char* chunk_check_name(ChunkCheck c);
Result<ChunkCheck> parse_chunk_check(const std::string& s);

struct BenchConfig {
  std::string base_url = "http://127.0.0.1:31000";
  EndpointKind endpoint = EndpointKind::kCompletions;
  std::string model;    // empty: the first id that /v1/models lists
  std::string api_key;  // sent as a Bearer token; never written to disk

  DatasetKind dataset = DatasetKind::kRandomIds;
  std::string dataset_path;  // jsonl only
  int64_t input_len = 1024;
  int64_t output_len = 128;
  double range_ratio = 1.0;  // random: lengths uniform in [len * ratio, len]
  int64_t vocab_size = 1024;  // random ids are drawn from [0, vocab_size)
  uint64_t seed = 0;

  int64_t num_prompts = 1;
  int64_t concurrency = 1;
  double request_rate = 0.0;  // requests/s, Poisson arrivals; 0 = no limit but concurrency
  int64_t warmup = 0;         // extra requests sent first, left out of every figure
  bool stream = true;
  ChunkCheck chunk_check = ChunkCheck::kAtMost;

  std::string out_dir;
  std::string run_id;     // label; defaults to the last component of out_dir
  std::string case_name;  // the Case column; defaults to "IN -> OUT, Cn"
  bool overwrite = false;

  double connect_timeout_s = 5.0;
  double read_timeout_s = 600.0;  // longest silence allowed inside one response

  Status validate() const;
  // Defaults that depend on other fields (run_id, case_name).
  BenchConfig resolved() const;
  // For manifest.json and summary.json; the api key is redacted.
  Json to_json() const;
};

// "16K -> 512, C8" in the seed's style; 1024 multiples are written with K.
std::string default_case_name(const BenchConfig& c);
std::string format_token_count(int64_t n);

}  // namespace pdserve::bench
