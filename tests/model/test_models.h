// Tiny models for tests, written once per test process by the real make-model code.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "pdserve/model/make_model.h"

namespace pdserve::testing {

inline std::string temp_dir(const std::string& tag) {
  std::string base = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/pdserve-test-" +
                     std::to_string(::getpid()) + "-" + tag;
  std::string cmd = "mkdir -p '" + base + "'";
  (void)std::system(cmd.c_str());
  return base;
}

inline const std::string& tiny_model_dir(const std::string& preset, uint64_t seed = 1234) {
  static std::map<std::string, std::string> made;
  const std::string key = preset + "-" + std::to_string(seed);
  auto it = made.find(key);
  if (it != made.end()) return it->second;
  std::string dir = temp_dir("models") + "/" + key;
  Status st = make_model(preset, dir, seed);
  if (!st.is_ok()) std::abort();
  return made[key] = dir;
}

// Deterministic prompt ids inside the tiny models' BPE range (1024 ranks).
inline std::vector<int32_t> random_ids(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(g() % 1024);
  return v;
}

}  // namespace pdserve::testing
