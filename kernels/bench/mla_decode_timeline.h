// The timeline mode of mla_decode_bench (docs/perf.md, MLA decode, eleventh version): from the
// per-CTA records the instrumented run and merge write (MlaDecodeWork::timeline, layout in
// mla/mla_decode.h), over `steps` back-to-back steps of one graph replay, where each step's
// time goes: phases relative to the step's first run CTA's entry, the gaps between kernels, the
// spread of the CTAs' finish times, the CTAs per SM. Host only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <vector>

#include "mla/mla_decode.h"

namespace pdserve::cuda::bench {

struct TimelineStep {
  // [event][cta] globaltimer ns relative to the step's first run entry (valid CTAs only).
  std::vector<double> run[kMlaTimelineEvents], merge[kMlaTimelineEvents];
  double t0 = 0;  // absolute ns of the first run entry
  std::map<int, int> run_per_sm;
  double clk_sum = 0, ns_sum = 0;  // clock64 and globaltimer ticks entry -> exit, summed over run CTAs
  std::vector<double> clk_phase[4];  // per run CTA, clock64 ticks of phase e -> e + 1
};

inline double tl_quant(std::vector<double> v, double q) {
  if (v.empty()) return 0.0 / 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)];
}
inline double tl_min(const std::vector<double>& v) { return v.empty() ? 0.0 / 0.0 : *std::min_element(v.begin(), v.end()); }
inline double tl_max(const std::vector<double>& v) { return v.empty() ? 0.0 / 0.0 : *std::max_element(v.begin(), v.end()); }

// rec: one step's records (mla_decode_timeline_records words / kMlaTimelineWords of them).
inline TimelineStep parse_timeline_step(const uint64_t* rec, int64_t capacity, int64_t records) {
  TimelineStep s;
  uint64_t t0 = ~0ull;
  for (int64_t i = 0; i < capacity; ++i)
    if (rec[i * kMlaTimelineWords + 11]) t0 = std::min(t0, rec[i * kMlaTimelineWords]);
  s.t0 = static_cast<double>(t0);
  for (int64_t i = 0; i < records; ++i) {
    const uint64_t* r = rec + i * kMlaTimelineWords;
    if (!r[11]) continue;
    const bool is_run = i < capacity;
    for (int e = 0; e < kMlaTimelineEvents; ++e) {
      const double v = static_cast<double>(static_cast<int64_t>(r[2 * e] - t0));
      (is_run ? s.run : s.merge)[e].push_back(v);
    }
    if (is_run) {
      ++s.run_per_sm[static_cast<int>(r[10])];
      s.clk_sum += static_cast<double>(r[9] - r[1]);
      s.ns_sum += static_cast<double>(r[8] - r[0]);
      for (int e = 0; e < 4; ++e) s.clk_phase[e].push_back(static_cast<double>(r[2 * e + 3] - r[2 * e + 1]));
    }
  }
  return s;
}

// Prints the summary: every figure is the median over steps 1..n-1 of that step's figure (step 0
// follows the replay's start, not a step), in us.
inline void print_timeline(const char* label, const std::vector<TimelineStep>& st, double plain_us, double tl_us, double floor_us,
                           double bytes_per_cta_mean) {
  const int n = static_cast<int>(st.size());
  auto med_over_steps = [&](auto f) {
    std::vector<double> v;
    for (int i = 1; i < n; ++i) v.push_back(f(i));
    return tl_quant(v, 0.5) * 1e-3;  // ns -> us
  };
  std::printf("timeline %s: graph us/step %.2f plain, %.2f instrumented; floor %.2f us; %zu run CTAs, %zu merge CTAs\n", label, plain_us,
              tl_us, floor_us, st.back().run[0].size(), st.back().merge[0].size());
  const char* run_names[] = {"entry", "wait done", "tile 0 in", "loop done", "exit"};
  const char* merge_names[] = {"entry", "wait done", "weights", "summed", "exit"};
  for (int k = 0; k < 2; ++k) {
    for (int e = 0; e < kMlaTimelineEvents; ++e) {
      auto field = [&](int i) -> const std::vector<double>& { return k == 0 ? st[i].run[e] : st[i].merge[e]; };
      if (field(n - 1).empty()) continue;
      std::printf("  %-5s %-9s  min %7.2f  med %7.2f  p90 %7.2f  max %7.2f\n", k == 0 ? "run" : "merge", (k == 0 ? run_names : merge_names)[e],
                  med_over_steps([&](int i) { return tl_min(field(i)); }), med_over_steps([&](int i) { return tl_quant(field(i), 0.5); }),
                  med_over_steps([&](int i) { return tl_quant(field(i), 0.9); }), med_over_steps([&](int i) { return tl_max(field(i)); }));
    }
  }
  // The kernel before the step's run: the previous step's merge (or its run, without a merge).
  auto prev_last = [&](int i, int e) {
    const TimelineStep& p = st[i - 1];
    const auto& v = p.merge[e].empty() ? p.run[e] : p.merge[e];
    return tl_max(v) + (p.t0 - st[i].t0);
  };
  std::printf("  gaps: prev kernel's last wait-done (its trigger) -> first run entry %.2f; prev kernel's last exit -> first run entry %.2f,"
              " -> first run wait done %.2f, -> median run wait done %.2f; step period %.2f\n",
              med_over_steps([&](int i) { return -prev_last(i, 1); }), med_over_steps([&](int i) { return -prev_last(i, 4); }),
              med_over_steps([&](int i) { return tl_min(st[i].run[1]) - prev_last(i, 4); }),
              med_over_steps([&](int i) { return tl_quant(st[i].run[1], 0.5) - prev_last(i, 4); }),
              n > 2 ? [&] {
                std::vector<double> v;
                for (int i = 1; i + 1 < n; ++i) v.push_back(st[i + 1].t0 - st[i].t0);
                return tl_quant(v, 0.5) * 1e-3;
              }()
                    : 0.0);
  std::printf("  run: exit spread (max - min) %.2f, p10 -> max %.2f; loop-done spread %.2f; stream window (first tile 0 in -> last loop done) %.2f"
              " = %.2f TB/s over the step's bytes\n",
              med_over_steps([&](int i) { return tl_max(st[i].run[4]) - tl_min(st[i].run[4]); }),
              med_over_steps([&](int i) { return tl_max(st[i].run[4]) - tl_quant(st[i].run[4], 0.1); }),
              med_over_steps([&](int i) { return tl_max(st[i].run[3]) - tl_min(st[i].run[3]); }),
              med_over_steps([&](int i) { return tl_max(st[i].run[3]) - tl_min(st[i].run[2]); }),
              bytes_per_cta_mean * st.back().run[0].size() /
                  (med_over_steps([&](int i) { return tl_max(st[i].run[3]) - tl_min(st[i].run[2]); }) * 1e-6) * 1e-12);
  if (!st.back().merge[0].empty())
    std::printf("  merge vs run's last exit: first merge entry %+.2f, first merge wait done %+.2f, last merge wait done %+.2f, last merge exit %+.2f\n",
                med_over_steps([&](int i) { return tl_min(st[i].merge[0]) - tl_max(st[i].run[4]); }),
                med_over_steps([&](int i) { return tl_min(st[i].merge[1]) - tl_max(st[i].run[4]); }),
                med_over_steps([&](int i) { return tl_max(st[i].merge[1]) - tl_max(st[i].run[4]); }),
                med_over_steps([&](int i) { return tl_max(st[i].merge[4]) - tl_max(st[i].run[4]); }));
  // Per-CTA phases from clock64 (no cross-SM clock needed), at the clock the stamps imply.
  const TimelineStep& last = st.back();
  const double ghz = last.ns_sum > 0 ? last.clk_sum / last.ns_sum : 0.0;
  const char* ph[] = {"entry->wait", "wait->tile0", "tile0->loop", "loop->exit"};
  std::printf("  per run CTA (clock64 at %.3f GHz, last step), us med / p90 / max:", ghz);
  for (int e = 0; e < 4; ++e)
    std::printf(" %s %.2f / %.2f / %.2f;", ph[e], tl_quant(last.clk_phase[e], 0.5) / ghz * 1e-3, tl_quant(last.clk_phase[e], 0.9) / ghz * 1e-3,
                tl_max(last.clk_phase[e]) / ghz * 1e-3);
  std::printf("\n  per-CTA stream rate (item bytes / tile0->loop, med): %.1f GB/s a CTA\n",
              bytes_per_cta_mean / (tl_quant(last.clk_phase[2], 0.5) / ghz) );
  std::map<int, int> hist;
  for (const auto& [sm, c] : last.run_per_sm) ++hist[c];
  std::printf("  SMs with run CTAs: %zu;", last.run_per_sm.size());
  for (const auto& [c, k] : hist) std::printf(" %d SMs hold %d;", k, c);
  // The globaltimer's granularity: the smallest positive gap between two stamps of the step.
  std::vector<double> all;
  for (int e = 0; e < kMlaTimelineEvents; ++e) all.insert(all.end(), last.run[e].begin(), last.run[e].end());
  std::sort(all.begin(), all.end());
  double gran = 1e30;
  for (size_t i = 1; i < all.size(); ++i)
    if (all[i] > all[i - 1]) gran = std::min(gran, all[i] - all[i - 1]);
  std::printf(" globaltimer: smallest step between stamps %.0f ns\n", gran);
  std::fflush(stdout);
}

}  // namespace pdserve::cuda::bench
