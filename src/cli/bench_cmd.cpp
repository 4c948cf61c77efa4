// pdserve bench --base-url URL --dataset random-ids --input-len N --output-len M
//               --num-prompts K --concurrency C --out DIR   (see docs/bench.md)
// Exit status: 0 every check passed; 1 the run finished but a check failed; 2 nothing was
// measured (bad configuration, unreachable endpoint, bad dataset, unwritable directory).
#include <cstdlib>
#include <iostream>

#include "commands.h"
#include "pdserve/bench/bench.h"

namespace pdserve::cli {

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Benchmark and check any OpenAI-compatible endpoint");
  struct Opts {
    bench::BenchConfig cfg;
    std::string dataset = "random-ids";
    std::string endpoint = "completions";
    bool no_stream = false;
    std::string chunk_check = "at-most";
  };
  auto o = std::make_shared<Opts>();
  auto& c = o->cfg;
  cmd->add_option("--base-url", c.base_url, "Server root, e.g. http://127.0.0.1:31000")->capture_default_str();
  cmd->add_option("--endpoint", o->endpoint, "completions or chat")->capture_default_str();
  cmd->add_option("--model", c.model, "Model name to send (default: the first id /v1/models lists)");
  cmd->add_option("--api-key", c.api_key, "Bearer token (not written to any file)");
  cmd->add_option("--dataset", o->dataset, "random-ids, random or jsonl")->capture_default_str();
  cmd->add_option("--dataset-path", c.dataset_path, "JSONL file for --dataset jsonl");
  cmd->add_option("--input-len", c.input_len, "Prompt tokens (random datasets)")->capture_default_str();
  cmd->add_option("--output-len", c.output_len, "max_tokens; exact with ignore_eos")->capture_default_str();
  cmd->add_option("--range-ratio", c.range_ratio, "random: lengths uniform in [len*ratio, len]")->capture_default_str();
  cmd->add_option("--vocab-size", c.vocab_size, "Random token ids come from [0, vocab-size)")->capture_default_str();
  cmd->add_option("--num-prompts", c.num_prompts, "Measured requests")->capture_default_str();
  cmd->add_option("--concurrency", c.concurrency, "Most requests in flight")->capture_default_str();
  cmd->add_option("--request-rate", c.request_rate, "Poisson arrivals per second, capped by --concurrency; 0 = no rate")
      ->capture_default_str();
  cmd->add_option("--warmup", c.warmup, "Warm-up requests sent first and left out of the figures")
      ->capture_default_str();
  cmd->add_flag("--no-stream", o->no_stream, "Non-streaming requests (TTFT = whole response, TPOT N/A)");
  cmd->add_option("--chunk-check", o->chunk_check,
                  "exact: one streamed chunk per token; at-most: servers may merge tokens into a chunk")
      ->capture_default_str();
  cmd->add_option("--out", c.out_dir, "Run directory to write")->required();
  cmd->add_option("--run-id", c.run_id, "Run label (default: the --out directory's name)");
  cmd->add_option("--case-name", c.case_name, "The Case column (default: \"IN -> OUT, Cn\")");
  cmd->add_option("--seed", c.seed, "Seed of the random prompts and arrivals")->capture_default_str();
  cmd->add_option("--connect-timeout", c.connect_timeout_s, "Seconds to wait for a connection")->capture_default_str();
  cmd->add_option("--read-timeout", c.read_timeout_s, "Longest silence inside one response, seconds")
      ->capture_default_str();
  cmd->add_flag("--overwrite", c.overwrite, "Replace an existing run in --out");

  cmd->callback([o]() {
    auto dataset = bench::parse_dataset(o->dataset);
    auto endpoint = bench::parse_endpoint(o->endpoint);
    auto chunk_check = bench::parse_chunk_check(o->chunk_check);
    for (const Status* st : {&dataset.status(), &endpoint.status(), &chunk_check.status()}) {
      if (!st->is_ok()) {
        std::cerr << "bench: " << st->message() << "\n";
        std::exit(2);
      }
    }
    o->cfg.chunk_check = *chunk_check;
    o->cfg.dataset = *dataset;
    o->cfg.endpoint = *endpoint;
    o->cfg.stream = !o->no_stream;
    auto outcome = bench::run_bench(o->cfg, bench::current_argv(), std::cerr);
    if (!outcome.is_ok()) {
      std::cerr << "bench: error: " << outcome.status().message() << "\n";
      std::exit(2);
    }
    const bench::RunReport& r = outcome->report;
    std::cout << bench::summary_table_header()
              << bench::summary_row(r.config.case_name, r.measured, r.metrics) << "\n";
    std::cerr << "bench: results in " << outcome->out_dir << "\n";
    if (!r.passed()) {
      std::cerr << "bench: FAILED\n" << r.failure_message();
      std::exit(1);
    }
  });
}

}  // namespace pdserve::cli
