// Helpers to run the model layer directly in tests.
#pragma once

#include <memory>
#include <vector>

#include "pdserve/model/model.h"

namespace pdserve::testing {

struct ModelRunner {
  std::unique_ptr<Model> model;
  std::unique_ptr<MlaKvPool> kv;
  std::unique_ptr<KdaStatePool> state;

  ModelRunner(const std::string& dir, int64_t pages = 64, int64_t page_size = 64, int64_t slots = 8,
              DType kv_dtype = DType::kF32) {
    auto m = Model::load(dir);
    if (!m.is_ok()) throw std::runtime_error(m.status().message());
    model = std::move(m).value();
    kv = MlaKvPool::for_model(model->config(), pages, page_size, kv_dtype);
    state = KdaStatePool::for_model(model->config(), slots);
  }
  ModelCaches caches() { return {kv.get(), state.get()}; }
  int64_t vocab() const { return model->config().vocab_size; }

  // All-position logits of one prompt, prefilled in chunks of `chunk` tokens.
  std::vector<float> prefill_logits(const std::vector<int32_t>& ids, int64_t chunk = 1 << 30, int64_t kda_chunk = 64) {
    SequenceInput seq;
    seq.pages = kv->allocate(kv->pages_for_tokens(static_cast<int64_t>(ids.size()))).value();
    seq.state_slot = state->allocate().value();
    seq.all_logits = true;
    std::vector<float> out;
    ForwardOptions opts;
    opts.kda_chunk = kda_chunk;
    ModelCaches c = caches();
    for (size_t s = 0; s < ids.size(); s += chunk) {
      seq.tokens.assign(ids.begin() + s, ids.begin() + std::min(ids.size(), s + chunk));
      ForwardOutput fo;
      Status st = model->forward(ForwardBatch{{seq}}, c, &fo, opts);
      if (!st.is_ok()) throw std::runtime_error(st.message());
      out.insert(out.end(), fo.logits.begin(), fo.logits.end());
      seq.cached_len += static_cast<int64_t>(seq.tokens.size());
    }
    (void)kv->free(seq.pages);
    (void)state->free(seq.state_slot);
    return out;
  }

  // Greedy continuation after prefilling `ids` whole.
  std::vector<int32_t> greedy(const std::vector<int32_t>& ids, int steps) {
    SequenceInput seq;
    seq.pages = kv->allocate(kv->pages_for_tokens(static_cast<int64_t>(ids.size()) + steps)).value();
    seq.state_slot = state->allocate().value();
    seq.tokens = ids;
    std::vector<int32_t> gen;
    ModelCaches c = caches();
    for (int i = 0; i < steps; ++i) {
      ForwardOutput fo;
      Status st = model->forward(ForwardBatch{{seq}}, c, &fo);
      if (!st.is_ok()) throw std::runtime_error(st.message());
      const float* row = fo.row(0);
      int32_t best = 0;
      for (int64_t v = 1; v < vocab(); ++v)
        if (row[v] > row[best]) best = static_cast<int32_t>(v);
      gen.push_back(best);
      seq.cached_len += static_cast<int64_t>(seq.tokens.size());
      seq.tokens = {best};
    }
    (void)kv->free(seq.pages);
    (void)state->free(seq.state_slot);
    return gen;
  }
};

}  // namespace pdserve::testing
