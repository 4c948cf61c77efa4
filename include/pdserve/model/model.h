// The Kimi-K3 / Kimi-Linear text model on the CPU backend, and its batch contract.
//
// Batch contract (what the scheduler and the PD transfer build on; see docs/design.md):
// one forward call takes any mix of sequences, each bringing `tokens` new tokens on top of
// `cached_len` tokens already folded into its state. For each sequence:
//   - `pages` is its block table: enough MLA pages for cached_len + tokens.size() tokens,
//     page i holding positions [i * page_size, (i + 1) * page_size).
//   - `state_slot` is its KDA slot. When cached_len == 0 the forward zeroes the slot first;
//     otherwise the slot must hold the state after exactly cached_len tokens.
// A prefill chunk is a sequence with many tokens; a decode step is a sequence with one.
// The forward writes the new tokens' latents into the pages and advances the slot's state,
// so after it returns the sequence's cached length is cached_len + tokens.size().
// Logits come back for the last token of each sequence, or for all of its new tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pdserve/model/cache_pools.h"
#include "pdserve/model/config.h"
#include "pdserve/model/parallel.h"
#include "pdserve/model/safetensors.h"
#include "pdserve/model/weights.h"

namespace pdserve {

struct SequenceInput {
  std::vector<int32_t> tokens;
  int64_t cached_len = 0;
  std::vector<int32_t> pages;
  int32_t state_slot = -1;
  bool all_logits = false;
};

struct ForwardBatch {
  std::vector<SequenceInput> seqs;
};

struct ForwardOutput {
  int64_t vocab = 0;
  std::vector<float> logits;          // [rows, vocab]
  std::vector<int64_t> first_row;     // per sequence: its first row in logits
  std::vector<int64_t> num_rows;      // per sequence: 1, or tokens.size() with all_logits
  // Empty, or per sequence: not ok where the stages of a pipeline agreed that sequence failed
  // (its rows are zeros; the others are good). Only a pipeline-parallel group fills it.
  std::vector<Status> seq_status;
  bool seq_failed(size_t seq) const { return seq < seq_status.size() && !seq_status[seq].is_ok(); }
  const float* row(size_t seq, int64_t i = -1) const {
    int64_t r = i < 0 ? first_row[seq] + num_rows[seq] - 1 : first_row[seq] + i;
    return logits.data() + r * vocab;
  }
};

// Debugging hook: called with a name (matching the reference's module names, e.g.
// "layers.3.self_attn") and the [rows, width] activations after that block.
using ForwardTrace = std::function<void(const std::string& name, const float* data, int64_t rows, int64_t width)>;

class StageChannel;  // pipeline.h

struct ForwardOptions {
  int64_t kda_chunk = 64;  // chunk length of the chunked delta rule for multi-token inputs
  ForwardTrace trace;      // optional
  // A pipeline stage (a model loaded with a LayerSpan short of the whole model) receives its
  // input activations from the previous stage and sends its output to the next one here;
  // only the last stage returns logits. Exactly one message per forward goes to the next
  // stage: the activations, or the failure that stopped this stage.
  StageChannel* channel = nullptr;
};

class Model {
 public:
  // One rank's shard (ShardSpec{} = the whole model). With shard.size > 1 the forward calls
  // `comm` collectives, so every rank of the group must run the same batches in step.
  // `layers`: a pipeline stage's layer range (pipeline.h); the default is every layer.
  static Result<std::unique_ptr<Model>> load(const std::string& dir, const ShardSpec& shard = {},
                                             Communicator* comm = nullptr, const LayerSpan& layers = {});

  const ModelConfig& config() const { return cfg_; }
  const ModelWeights& weights() const { return w_; }
  const ShardSpec& shard() const { return shard_; }
  const LayerSpan& layers() const { return layers_; }
  bool first_stage() const { return layers_.first(); }
  bool last_stage() const { return layers_.last(cfg_.num_layers); }
  // MLA / KDA layers this stage owns: the layer counts of its pools.
  int64_t stage_mla_layers() const { return stage_mla_; }
  int64_t stage_kda_layers() const { return stage_kda_; }

  // Checks a batch against the pools without touching them (tokens in vocab, pages cover
  // every position and exist, slots exist, no slot used twice).
  Status validate(const ForwardBatch& batch, const ModelCaches& caches) const;
  Status forward(const ForwardBatch& batch, ModelCaches& caches, ForwardOutput* out,
                 const ForwardOptions& opts = {}) const;

 private:
  Model() = default;
  ModelConfig cfg_;
  WeightStore store_;  // keeps the mapped MXFP4 experts alive
  ModelWeights w_;
  Status forward_layers(const ForwardBatch& batch, ModelCaches& caches, ForwardOutput* out, const ForwardOptions& opts,
                        bool* sent) const;
  ShardSpec shard_;
  Communicator* comm_ = nullptr;
  LayerSpan layers_;
  int64_t stage_mla_ = 0, stage_kda_ = 0;
  std::vector<int64_t> pool_layer_;  // model layer -> index in this stage's pool (MLA or KDA)
};

}  // namespace pdserve
