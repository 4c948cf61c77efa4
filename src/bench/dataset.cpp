#include "pdserve/bench/dataset.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "pdserve/core/file_util.h"
#include "pdserve/core/json_util.h"

namespace pdserve::bench {
namespace {

int64_t low_end(int64_t len, double ratio) {
  return std::clamp<int64_t>(static_cast<int64_t>(std::floor(static_cast<double>(len) * ratio)), 1, len);
}

Status line_error(const std::string& where, size_t line_no, const std::string& what) {
  return invalid_argument(where + ":" + std::to_string(line_no) + ": " + what);
}

Result<BenchPrompt> parse_line(const std::string& line, const std::string& where, size_t line_no,
                               int64_t default_output_len) {
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return line_error(where, line_no, "not valid JSON");
  if (!j.is_object()) return line_error(where, line_no, "expected a JSON object");
  BenchPrompt p;
  p.output_len = default_output_len;
  if (j.contains("prompt_ids")) {
    const Json& ids = j["prompt_ids"];
    if (!ids.is_array() || ids.empty()) return line_error(where, line_no, "\"prompt_ids\" must be a non-empty array");
    for (const Json& v : ids) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        return line_error(where, line_no, "\"prompt_ids\" must hold non-negative integers");
      p.ids.push_back(v.get<int64_t>());
    }
  } else if (j.contains("prompt")) {
    if (!j["prompt"].is_string() || j["prompt"].get<std::string>().empty())
      return line_error(where, line_no, "\"prompt\" must be a non-empty string");
    p.text = j["prompt"].get<std::string>();
  } else if (j.contains("turns")) {
    const Json& t = j["turns"];
    if (!t.is_array() || t.empty() || !t[0].is_string() || t[0].get<std::string>().empty())
      return line_error(where, line_no, "\"turns\" must be a non-empty array of strings");
    p.text = t[0].get<std::string>();
  } else {
    return line_error(where, line_no, "needs one of \"prompt\", \"prompt_ids\" or \"turns\"");
  }
  if (j.contains("category")) {
    if (!j["category"].is_string()) return line_error(where, line_no, "\"category\" must be a string");
    p.category = j["category"].get<std::string>();
  }
  if (j.contains("output_len")) {
    if (!j["output_len"].is_number_integer() || j["output_len"].get<int64_t>() < 1)
      return line_error(where, line_no, "\"output_len\" must be a positive integer");
    p.output_len = j["output_len"].get<int64_t>();
  }
  return p;
}

}  // namespace

std::vector<BenchPrompt> random_id_prompts(int64_t count, int64_t input_len, int64_t output_len,
                                           double range_ratio, int64_t vocab_size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> in_len(low_end(input_len, range_ratio), input_len);
  std::uniform_int_distribution<int64_t> out_len(low_end(output_len, range_ratio), output_len);
  std::uniform_int_distribution<int64_t> token(0, vocab_size - 1);
  std::vector<BenchPrompt> prompts(static_cast<size_t>(count));
  for (auto& p : prompts) {
    p.ids.resize(static_cast<size_t>(in_len(rng)));
    p.output_len = out_len(rng);
    for (auto& id : p.ids) id = token(rng);
  }
  return prompts;
}

Result<std::vector<BenchPrompt>> parse_jsonl_prompts(const std::string& text, const std::string& where,
                                                     int64_t default_output_len) {
  std::vector<BenchPrompt> prompts;
  std::istringstream in(text);
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    PDS_ASSIGN_OR_RETURN(BenchPrompt p, parse_line(line, where, line_no, default_output_len));
    prompts.push_back(std::move(p));
  }
  if (prompts.empty()) return invalid_argument(where + ": no prompts (the dataset is empty)");
  return prompts;
}

Result<std::vector<BenchPrompt>> make_prompts(const BenchConfig& cfg, int64_t count) {
  switch (cfg.dataset) {
    case DatasetKind::kRandomIds:
      return random_id_prompts(count, cfg.input_len, cfg.output_len, 1.0, cfg.vocab_size, cfg.seed);
    case DatasetKind::kRandom:
      return random_id_prompts(count, cfg.input_len, cfg.output_len, cfg.range_ratio, cfg.vocab_size, cfg.seed);
    case DatasetKind::kJsonl: {
      PDS_ASSIGN_OR_RETURN(std::string text, read_file(cfg.dataset_path));
      PDS_ASSIGN_OR_RETURN(std::vector<BenchPrompt> lines,
                           parse_jsonl_prompts(text, cfg.dataset_path, cfg.output_len));
      std::vector<BenchPrompt> prompts;
      prompts.reserve(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) prompts.push_back(lines[static_cast<size_t>(i) % lines.size()]);
      return prompts;
    }
  }
  return internal_error("unknown dataset");
}

}  // namespace pdserve::bench
