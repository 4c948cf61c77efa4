#include "pdserve/model/model.h"

#include <set>

#include "forward_internal.h"
#include "pdserve/model/pipeline.h"
#include "pdserve/ops/attn_res.h"
#include "pdserve/ops/elementwise.h"
#include "pdserve/ops/linear.h"

namespace pdserve {

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, const ShardSpec& shard, Communicator* comm, const LayerSpan& layers) {
  if (shard.size > 1 && (!comm || comm->size() != shard.size || comm->rank() != shard.rank))
    return invalid_argument("Model::load: a tensor-parallel shard needs a communicator of the same rank and size");
  std::unique_ptr<Model> m(new Model());
  m->shard_ = shard;
  m->comm_ = comm;
  PDS_ASSIGN_OR_RETURN(m->cfg_, load_model_config(dir));
  PDS_ASSIGN_OR_RETURN(m->store_, WeightStore::open_dir(dir));
  PDS_ASSIGN_OR_RETURN(m->w_, load_model_weights(m->cfg_, m->store_, shard, layers));
  m->layers_ = LayerSpan{layers.begin, layers.resolved_end(m->cfg_.num_layers)};
  // Pool indices count only this stage's layers: its pools hold nothing else.
  int64_t& mla = m->stage_mla_;
  int64_t& kda = m->stage_kda_;
  for (int64_t i = 0; i < m->cfg_.num_layers; ++i) {
    const bool mine = m->layers_.contains(i, m->cfg_.num_layers);
    const bool is_mla = m->cfg_.layer_kinds[static_cast<size_t>(i)] == LayerKind::kMla;
    m->pool_layer_.push_back(!mine ? -1 : is_mla ? mla++ : kda++);
  }
  return m;
}

Status Model::validate(const ForwardBatch& batch, const ModelCaches& caches) const {
  if (!caches.kv || !caches.state) return invalid_argument("forward: caches are not set");
  if (caches.kv->num_layers() != stage_mla_ || caches.kv->entry_dim() != cfg_.mla_cache_dim())
    return invalid_argument("forward: KV pool shape does not match the model");
  if (caches.state->num_layers() != stage_kda_ || caches.state->heads() != shard_.local(cfg_.kda_num_heads) ||
      caches.state->head_dim() != cfg_.kda_head_dim)
    return invalid_argument("forward: KDA state pool shape does not match the model");
  std::set<int32_t> slots;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SequenceInput& seq = batch.seqs[s];
    const std::string who = "forward: sequence " + std::to_string(s);
    if (seq.tokens.empty()) return invalid_argument(who + " has no tokens");
    if (seq.cached_len < 0) return invalid_argument(who + " has a negative cached length");
    for (int32_t t : seq.tokens)
      if (t < 0 || t >= cfg_.vocab_size) return invalid_argument(who + ": token id " + std::to_string(t) + " is outside the vocabulary");
    const int64_t need = caches.kv->pages_for_tokens(seq.cached_len + static_cast<int64_t>(seq.tokens.size()));
    if (static_cast<int64_t>(seq.pages.size()) < need)
      return invalid_argument(who + " needs " + std::to_string(need) + " pages, has " + std::to_string(seq.pages.size()));
    for (int32_t p : seq.pages)
      if (p < 0 || p >= caches.kv->num_pages()) return invalid_argument(who + ": page " + std::to_string(p) + " does not exist");
    if (seq.state_slot < 0 || seq.state_slot >= caches.state->num_slots())
      return invalid_argument(who + ": state slot " + std::to_string(seq.state_slot) + " does not exist");
    if (!slots.insert(seq.state_slot).second) return invalid_argument(who + ": state slot used twice in one batch");
  }
  return Status::ok();
}

Status Model::forward(const ForwardBatch& batch, ModelCaches& caches, ForwardOutput* out, const ForwardOptions& opts) const {
  const bool staged = !first_stage() || !last_stage();
  if (staged && !opts.channel) return invalid_argument("forward: a pipeline stage needs a stage channel");
  bool sent = false;
  Status st = forward_layers(batch, caches, out, opts, &sent);
  // The next stage waits for exactly one message per forward: never leave it hanging.
  if (!st.is_ok() && !last_stage() && !sent) (void)opts.channel->send_failure(opts.channel->stage() + 1, st);
  return st;
}

Status Model::forward_layers(const ForwardBatch& batch, ModelCaches& caches, ForwardOutput* out, const ForwardOptions& opts,
                             bool* sent) const {
  PDS_RETURN_IF_ERROR(validate(batch, caches));
  const ModelConfig& c = cfg_;
  const int64_t hd = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  detail::StepLayout lay;
  for (const SequenceInput& seq : batch.seqs) {
    lay.row_begin.push_back(lay.total_rows);
    lay.total_rows += static_cast<int64_t>(seq.tokens.size());
    if (seq.cached_len == 0) caches.state->zero(seq.state_slot);
  }
  const int64_t T = lay.total_rows;

  const int64_t L0 = layers_.begin, L1 = layers_.end;
  std::vector<float> x(T * hd);
  // Attention residuals: bank of block snapshots; `partial` is the running block sum.
  std::vector<std::vector<float>> bank;
  if (first_stage()) {
    for (size_t s = 0; s < batch.seqs.size(); ++s)
      for (size_t i = 0; i < batch.seqs[s].tokens.size(); ++i) {
        const float* e = w_.embed.row(batch.seqs[s].tokens[i]);
        std::copy(e, e + hd, &x[(lay.row_begin[s] + i) * hd]);
      }
  } else {
    // The previous stage's residual stream, then its bank of snapshots (pipeline.h).
    std::vector<float> msg(static_cast<size_t>(stage_activation_floats(c, L0, T)));
    PDS_RETURN_IF_ERROR(opts.channel->recv(opts.channel->stage() - 1, msg.data(), static_cast<int64_t>(msg.size())));
    std::copy(msg.begin(), msg.begin() + T * hd, x.begin());
    for (size_t off = static_cast<size_t>(T * hd); off < msg.size(); off += static_cast<size_t>(T * hd))
      bank.emplace_back(msg.begin() + static_cast<std::ptrdiff_t>(off), msg.begin() + static_cast<std::ptrdiff_t>(off + T * hd));
  }

  std::vector<float> normed(T * hd), block_out(T * hd), mixed(T * hd);
  auto mix = [&](const std::vector<float>& partial, const std::vector<float>& score, std::vector<float>& dst) {
    std::vector<const float*> src(bank.size() + 1);
    for (int64_t t = 0; t < T; ++t) {
      for (size_t b = 0; b < bank.size(); ++b) src[b] = &bank[b][t * hd];
      src[bank.size()] = &partial[t * hd];
      ops::attn_res_mix(src.data(), static_cast<int>(src.size()), hd, score.data(), eps, &dst[t * hd]);
    }
  };

  auto trace = [&](const std::string& name, const float* data) {
    if (opts.trace) opts.trace(name, data, T, hd);
  };
  if (first_stage()) trace("embed_tokens", x.data());
  auto attention = [&](int64_t i, const float* in, float* o) {
    const LayerWeights& l = w_.layers[i];
    ops::rms_norm(in, T, hd, l.input_norm.data(), eps, normed.data());
    if (l.kind == LayerKind::kMla)
      detail::mla_layer(c, l.mla, batch, lay, pool_layer_[i], *caches.kv, normed.data(), o);
    else
      detail::kda_layer(c, l.kda, batch, lay, pool_layer_[i], *caches.state, opts, normed.data(), o);
    detail::reduce_partial(comm_, o, T * hd);
    trace("layers." + std::to_string(i) + ".input_layernorm", normed.data());
    trace("layers." + std::to_string(i) + ".self_attn", o);
  };
  auto ffn = [&](int64_t i, const float* in, float* o) {
    const LayerWeights& l = w_.layers[i];
    ops::rms_norm(in, T, hd, l.post_attn_norm.data(), eps, normed.data());
    if (l.is_moe) {
      detail::moe_forward(c, l.moe, normed.data(), T, comm_, o);
    } else {
      detail::mlp_forward(c, l.mlp, normed.data(), T, o);
      detail::reduce_partial(comm_, o, T * hd);
    }
    trace("layers." + std::to_string(i) + ".post_attention_layernorm", normed.data());
    trace("layers." + std::to_string(i) + (l.is_moe ? ".block_sparse_moe" : ".mlp"), o);
  };

  for (int64_t i = L0; i < L1; ++i) {
    const LayerWeights& l = w_.layers[i];
    if (!c.attn_residuals()) {
      attention(i, x.data(), block_out.data());
      for (int64_t j = 0; j < T * hd; ++j) x[j] += block_out[j];
      ffn(i, x.data(), block_out.data());
      for (int64_t j = 0; j < T * hd; ++j) x[j] += block_out[j];
      trace("layers." + std::to_string(i), x.data());
      continue;
    }
    // x is the running partial sum of the current block.
    const std::vector<float>* attn_in = &x;
    if (!bank.empty()) {
      mix(x, l.attn_res_score, mixed);
      attn_in = &mixed;
    }
    const bool new_block = i % c.attn_res_block_size == 0;
    attention(i, attn_in->data(), block_out.data());
    if (new_block) {
      bank.push_back(x);  // snapshot taken before this layer's attention is added
      x = block_out;      // the new block's partial sum starts from this attention output
    } else {
      for (int64_t j = 0; j < T * hd; ++j) x[j] += block_out[j];
    }
    mix(x, l.mlp_res_score, mixed);
    ffn(i, mixed.data(), block_out.data());
    for (int64_t j = 0; j < T * hd; ++j) x[j] += block_out[j];
    trace("layers." + std::to_string(i), x.data());
  }
  if (!last_stage()) {
    std::vector<float> msg = x;
    for (const auto& b : bank) msg.insert(msg.end(), b.begin(), b.end());
    *sent = true;
    return opts.channel->send(opts.channel->stage() + 1, msg.data(), static_cast<int64_t>(msg.size()));
  }
  if (c.attn_residuals()) {
    mix(x, w_.output_res_score, mixed);
    x.swap(mixed);
  }

  // Final norm and lm_head only for the rows the caller wants.
  out->vocab = c.vocab_size;
  out->first_row.clear();
  out->num_rows.clear();
  std::vector<int64_t> rows;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const int64_t n = static_cast<int64_t>(batch.seqs[s].tokens.size());
    out->first_row.push_back(static_cast<int64_t>(rows.size()));
    out->num_rows.push_back(batch.seqs[s].all_logits ? n : 1);
    for (int64_t i = batch.seqs[s].all_logits ? 0 : n - 1; i < n; ++i) rows.push_back(lay.row_begin[s] + i);
  }
  std::vector<float> h(rows.size() * hd);
  for (size_t r = 0; r < rows.size(); ++r) ops::rms_norm(&x[rows[r] * hd], 1, hd, w_.final_norm.data(), eps, &h[r * hd]);
  const int64_t R = static_cast<int64_t>(rows.size()), vl = w_.lm_head.rows;
  out->logits.resize(R * c.vocab_size);
  if (shard_.size == 1) {
    ops::matmul_nt(h.data(), R, w_.lm_head, out->logits.data());
    return Status::ok();
  }
  // Each rank holds a slice of the vocabulary: gather the slices, then lay them out by row.
  std::vector<float> mine(R * vl), all(R * c.vocab_size);
  ops::matmul_nt(h.data(), R, w_.lm_head, mine.data());
  comm_->all_gather(mine.data(), R * vl, all.data());
  for (int r = 0; r < shard_.size; ++r)
    for (int64_t i = 0; i < R; ++i)
      std::copy(&all[(r * R + i) * vl], &all[(r * R + i + 1) * vl], &out->logits[i * c.vocab_size + r * vl]);
  return Status::ok();
}

}  // namespace pdserve
