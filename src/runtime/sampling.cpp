// Order of operations (as vLLM / HF): penalties on the logits, then greedy or
// temperature -> top_k -> softmax -> top_p -> min_p -> one draw. Logprobs are of the raw
// model distribution (before penalties and temperature), as vLLM reports by default.
#include "pdserve/runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace pdserve::runtime {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Deterministic uniform in [0, 1) from one 64-bit draw (std distributions vary by library).
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0); }
}  // namespace

Sampler::Sampler(const SamplingParams& params, std::span<const int32_t> prompt, uint64_t fallback_seed)
    : p_(params), rng_(params.seed.value_or(fallback_seed)) {
  if (p_.repetition_penalty != 1.0) {
    for (int32_t t : prompt) {
      if (t < 0) continue;
      if (static_cast<size_t>(t) >= seen_.size()) seen_.resize(static_cast<size_t>(t) + 1, 0);
      seen_[static_cast<size_t>(t)] = 1;
    }
  }
}

int32_t Sampler::argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t v = 1; v < logits.size(); ++v)
    if (logits[v] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(v);
  return best;
}

TokenLogprob Sampler::logprobs(std::span<const float> logits, int32_t token, int64_t k) {
  float mx = kNegInf;
  for (float x : logits) mx = std::max(mx, x);
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  TokenLogprob out;
  out.id = token;
  out.logprob = logits[static_cast<size_t>(token)] - lse;
  if (k > 0) {
    std::vector<int32_t> idx(logits.size());
    std::iota(idx.begin(), idx.end(), 0);
    const size_t kk = std::min<size_t>(static_cast<size_t>(k), idx.size());
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(kk), idx.end(), [&](int32_t a, int32_t b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
             (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
    });
    for (size_t i = 0; i < kk; ++i) out.top.push_back({idx[i], logits[static_cast<size_t>(idx[i])] - lse});
  }
  return out;
}

void Sampler::apply_penalties(std::vector<float>& l) const {
  if (p_.repetition_penalty != 1.0) {
    const float rp = static_cast<float>(p_.repetition_penalty);
    for (size_t t = 0; t < seen_.size() && t < l.size(); ++t) {
      if (!seen_[t]) continue;
      l[t] = l[t] > 0 ? l[t] / rp : l[t] * rp;
    }
  }
  if (p_.presence_penalty != 0.0 || p_.frequency_penalty != 0.0) {
    for (const auto& [t, n] : output_counts_) {
      if (t < 0 || static_cast<size_t>(t) >= l.size()) continue;
      l[static_cast<size_t>(t)] -= static_cast<float>(p_.frequency_penalty * static_cast<double>(n) + p_.presence_penalty);
    }
  }
}

int32_t Sampler::draw(std::vector<float>& l) {
  const float inv_t = static_cast<float>(1.0 / p_.temperature);
  for (float& x : l) x *= inv_t;
  const size_t n = l.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    std::vector<float> copy(l);
    std::nth_element(copy.begin(), copy.begin() + (p_.top_k - 1), copy.end(), std::greater<float>());
    const float kth = copy[static_cast<size_t>(p_.top_k - 1)];
    for (float& x : l)
      if (x < kth) x = kNegInf;
  }
  float mx = kNegInf;
  for (float x : l) mx = std::max(mx, x);
  std::vector<double> prob(n);
  double sum = 0.0;
  for (size_t v = 0; v < n; ++v) sum += prob[v] = l[v] == kNegInf ? 0.0 : std::exp(static_cast<double>(l[v] - mx));
  for (double& q : prob) q /= sum;
  if (p_.top_p < 1.0) {
    std::vector<int32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
      return prob[static_cast<size_t>(a)] > prob[static_cast<size_t>(b)] ||
             (prob[static_cast<size_t>(a)] == prob[static_cast<size_t>(b)] && a < b);
    });
    double cum = 0.0;
    size_t keep = 0;
    while (keep < n && (keep == 0 || cum < p_.top_p)) cum += prob[static_cast<size_t>(idx[keep++])];
    for (size_t i = keep; i < n; ++i) prob[static_cast<size_t>(idx[i])] = 0.0;
  }
  if (p_.min_p > 0.0) {
    const double pmax = *std::max_element(prob.begin(), prob.end());
    for (double& q : prob)
      if (q < p_.min_p * pmax) q = 0.0;
  }
  double total = 0.0;
  for (double q : prob) total += q;
  const double u = uniform01(rng_) * total;  // exactly one draw per token: reproducible
  double acc = 0.0;
  int32_t last = -1;
  for (size_t v = 0; v < n; ++v) {
    if (prob[v] <= 0.0) continue;
    last = static_cast<int32_t>(v);
    acc += prob[v];
    if (u < acc) return last;
  }
  return last >= 0 ? last : argmax(l);
}

SampleResult Sampler::sample(std::span<const float> logits) {
  std::vector<float> l(logits.begin(), logits.end());
  apply_penalties(l);
  SampleResult r;
  r.token = p_.greedy() ? argmax(l) : draw(l);
  if (p_.logprobs) r.logprob = logprobs(logits, r.token, p_.top_logprobs);
  record(r.token);
  return r;
}

void Sampler::observe(int32_t token) {
  record(token);
  if (!p_.greedy()) (void)rng_();  // the draw draw() took for this token in a unified run
}

void Sampler::record(int32_t token) {
  ++output_counts_[token];
  if (p_.repetition_penalty != 1.0 && token >= 0) {
    if (static_cast<size_t>(token) >= seen_.size()) seen_.resize(static_cast<size_t>(token) + 1, 0);
    seen_[static_cast<size_t>(token)] = 1;
  }
}

}  // namespace pdserve::runtime
