// Pipeline parallelism for the prefill role: which layers a stage owns, the point-to-point
// channel that carries activations from stage to stage, and the per-request agreement the
// stages reach each round. docs/design.md ("Pipeline parallelism") states the design.
//
// A stage owns a contiguous range of layers (the embedding on the first, the final norm and
// lm_head on the last) and only those layers' MLA pages and KDA state. A forward round splits
// the batch into micro-batches (whole sequences) that flow stage 0 -> 1 -> ... in order
// (GPipe fill/drain: stage s runs micro-batch k while stage s-1 runs k+1).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pdserve/core/status.h"
#include "pdserve/model/config.h"
#include "pdserve/model/parallel.h"

namespace pdserve {

// Relative cost of one layer's prefill work per token (weights read and multiplied): the
// attention block (MLA: q/kv LoRA + per-head projections; KDA: q/k/v/g/beta projections plus
// the state update) and the FFN (dense MLP, or MoE: routed experts actually used per token +
// shared experts + router). Only ratios matter; see docs/design.md for the formula.
double layer_cost(const ModelConfig& c, int64_t layer);

// Contiguous layer ranges, one per stage, minimising the most expensive stage (exact: a
// binary search over the bottleneck with a greedy fill). kInvalidArgument naming `flag`
// when pp < 1 or the model has fewer layers than stages.
Result<std::vector<LayerSpan>> plan_pipeline_stages(const ModelConfig& c, int pp, const std::string& flag = "--pp");

// Floats one micro-batch of `rows` tokens carries from the stage ending before layer
// `next_layer` to the next one: the residual stream, plus with attention residuals the
// bank of block snapshots taken so far (ceil(next_layer / block) of them).
int64_t stage_activation_floats(const ModelConfig& c, int64_t next_layer, int64_t rows);

// One stage's end of the point-to-point channels between stages. Messages between one pair
// of stages arrive in the order sent. A stage that cannot produce a micro-batch sends a
// failure instead, so the stages after it do not wait forever; recv then returns it.
class StageChannel {
 public:
  virtual ~StageChannel() = default;
  virtual int stage() const = 0;
  virtual int num_stages() const = 0;
  virtual Status send(int to, const float* data, int64_t n) = 0;
  virtual Status send_failure(int to, const Status& why) = 0;
  // Exactly n floats, or the sender's failure, or kInternal when the sizes disagree.
  virtual Status recv(int from, float* data, int64_t n) = 0;
};

// Stages as threads of this process (threads + queues): one endpoint per stage; endpoint s
// must be used by stage s's thread only.
std::vector<std::unique_ptr<StageChannel>> make_in_process_pipeline(int stages);

// One node's endpoint when the stages span nodes: this node runs stages first..first+L-1 of
// `num_stages` (L = local->num_stages(); `local` numbers them 0..L-1), `up` links stage
// first-1 to stage first and `down` stage first+L-1 to stage first+L (either null at the
// ends of the pipeline). The endpoint is stage `stage` (global) and routes by stage number.
std::unique_ptr<StageChannel> make_spliced_stage_channel(std::unique_ptr<StageChannel> local, int first, int stage, int num_stages,
                                                         std::unique_ptr<StageChannel> up, std::unique_ptr<StageChannel> down);

// What one stage says about each sequence of a round (indexed like the batch).
enum class StageSeqState : uint8_t { kPending = 0, kReady = 1, kFailed = 2 };

struct RoundAgreement {
  std::vector<uint8_t> ready;   // ready on every stage (the intersection)
  std::vector<uint8_t> failed;  // failed on any stage (the union); failed wins over ready
};

// The agreement rule over every stage's report (reports[stage][seq]; all the same length).
RoundAgreement agree_round(const std::vector<std::vector<StageSeqState>>& reports);

}  // namespace pdserve
