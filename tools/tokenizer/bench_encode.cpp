// Single-thread encode throughput: bench_encode --model DIR --input FILE [--repeat N]
// Prints one JSON line {"bytes":..,"tokens":..,"seconds":..,"mb_per_s":..}. Driven by
// bench_encode.py, which times tiktoken on the same file in the same run.
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "pdserve/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  std::string model, input;
  int repeat = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model")) model = argv[i + 1];
    else if (!std::strcmp(argv[i], "--input")) input = argv[i + 1];
    else if (!std::strcmp(argv[i], "--repeat")) repeat = std::atoi(argv[i + 1]);
  }
  auto tok = pdserve::tokenizer::Tokenizer::load(model);
  if (!tok.is_ok()) {
    std::cerr << tok.status().to_string() << '\n';
    return 1;
  }
  std::ifstream f(input, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  // Documents separated by NUL bytes, as bench_encode.py writes them.
  std::vector<std::string> docs;
  std::string line;
  size_t bytes = 0;
  while (std::getline(ss, line, '\0')) {
    bytes += line.size();
    docs.push_back(std::move(line));
  }
  size_t tokens = 0;
  for (const auto& d : docs) tokens += tok->encode(d).size();  // warm-up
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    size_t n = 0;
    for (const auto& d : docs) n += tok->encode(d).size();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (n != tokens) return 2;
    best = std::min(best, s);
  }
  std::cout << "{\"bytes\":" << bytes << ",\"tokens\":" << tokens << ",\"seconds\":" << best
            << ",\"mb_per_s\":" << bytes / best / 1e6 << "}\n";
  return 0;
}
