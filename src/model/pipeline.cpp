#include "pdserve/model/pipeline.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

namespace pdserve {

double layer_cost(const ModelConfig& c, int64_t layer) {
  const double h = static_cast<double>(c.hidden_size);
  double attn = 0;
  if (c.layer_kinds[static_cast<size_t>(layer)] == LayerKind::kMla) {
    const double q_in = c.q_lora_rank > 0 ? static_cast<double>(c.q_lora_rank) : h;
    const double q = (c.q_lora_rank > 0 ? h * c.q_lora_rank : 0) + q_in * c.num_heads * c.q_head_dim();
    const double kv = h * c.mla_cache_dim() + static_cast<double>(c.kv_lora_rank) * c.num_heads * (c.qk_nope_head_dim + c.v_head_dim);
    const double o = static_cast<double>(c.num_heads) * c.v_head_dim * h * (c.mla_output_gate ? 2 : 1);
    attn = q + kv + o;
  } else {
    const double p = static_cast<double>(c.kda_proj_dim());
    // q, k, v, output gate and o_proj (~5 h x p), the small gates, and the per-token state
    // update of H heads of D x D.
    attn = 5 * h * p + 2 * h * c.kda_num_heads + static_cast<double>(c.kda_num_heads) * c.kda_head_dim * c.kda_head_dim * 4;
  }
  double ffn = 0;
  if (c.layer_is_moe[static_cast<size_t>(layer)]) {
    const double eh = static_cast<double>(c.routed_expert_hidden_size > 0 ? c.routed_expert_hidden_size : c.hidden_size);
    const double expert = 3 * eh * c.moe_intermediate_size;
    // MXFP4 experts read a quarter of the bytes of fp16 ones; the cost model counts multiplies.
    ffn = c.num_experts_per_token * expert + c.num_shared_experts * 3 * h * c.moe_intermediate_size + h * c.num_experts +
          (c.latent_moe ? 2 * h * eh : 0);
  } else {
    ffn = 3 * h * c.intermediate_size;
  }
  return attn + ffn;
}

Result<std::vector<LayerSpan>> plan_pipeline_stages(const ModelConfig& c, int pp, const std::string& flag) {
  if (pp < 1) return invalid_argument(flag + " must be at least 1 (got " + std::to_string(pp) + ")");
  if (c.num_layers < pp)
    return invalid_argument(flag + " " + std::to_string(pp) + " needs at least as many layers as stages; the model has " +
                            std::to_string(c.num_layers));
  std::vector<double> cost(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) cost[static_cast<size_t>(i)] = layer_cost(c, i);
  // Greedy fill under a bottleneck `cap`, keeping at least one layer for every later stage.
  auto fill = [&](double cap, std::vector<LayerSpan>* out) {
    out->clear();
    int64_t i = 0;
    for (int s = 0; s < pp; ++s) {
      const int64_t stages_after = pp - 1 - s;
      LayerSpan span{i, i};
      double sum = 0;
      while (span.end < c.num_layers - stages_after && (span.end == span.begin || sum + cost[static_cast<size_t>(span.end)] <= cap)) {
        sum += cost[static_cast<size_t>(span.end)];
        ++span.end;
      }
      if (sum > cap) return false;
      out->push_back(span);
      i = span.end;
    }
    return i == c.num_layers;
  };
  double lo = *std::max_element(cost.begin(), cost.end()), hi = 0;
  for (double x : cost) hi += x;
  std::vector<LayerSpan> best, trial;
  if (!fill(hi, &best)) return internal_error("pipeline stage planning: no split under the total cost");
  for (int it = 0; it < 100 && hi - lo > 1e-9 * hi; ++it) {
    const double mid = (lo + hi) / 2;
    if (fill(mid, &trial)) {
      hi = mid;
      best = trial;
    } else {
      lo = mid;
    }
  }
  return best;
}

int64_t stage_activation_floats(const ModelConfig& c, int64_t next_layer, int64_t rows) {
  int64_t snapshots = 0;
  if (c.attn_residuals()) snapshots = (next_layer + c.attn_res_block_size - 1) / c.attn_res_block_size;
  return (1 + snapshots) * rows * c.hidden_size;
}

namespace {

struct Message {
  Status failure;  // not ok: the sender could not produce this micro-batch
  std::vector<float> data;
};

// Shared by the endpoints: one FIFO per (from, to) pair.
struct PipeState {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<Message>> queues;
};

class InProcessStageChannel final : public StageChannel {
 public:
  InProcessStageChannel(std::shared_ptr<PipeState> p, int stage, int stages) : p_(std::move(p)), stage_(stage), stages_(stages) {}
  int stage() const override { return stage_; }
  int num_stages() const override { return stages_; }
  Status send(int to, const float* data, int64_t n) override {
    return push(to, Message{Status::ok(), std::vector<float>(data, data + n)});
  }
  Status send_failure(int to, const Status& why) override {
    return push(to, Message{why.is_ok() ? internal_error("stage failure without a reason") : why, {}});
  }
  Status recv(int from, float* data, int64_t n) override {
    if (from < 0 || from >= stages_ || from == stage_) return invalid_argument("stage channel: no stage " + std::to_string(from) + " to receive from");
    std::unique_lock lk(p_->mu);
    auto& q = p_->queues[{from, stage_}];
    p_->cv.wait(lk, [&] { return !q.empty(); });
    Message m = std::move(q.front());
    q.pop_front();
    lk.unlock();
    if (!m.failure.is_ok()) return m.failure;
    if (static_cast<int64_t>(m.data.size()) != n)
      return internal_error("stage channel: stage " + std::to_string(from) + " sent " + std::to_string(m.data.size()) + " floats, stage " +
                            std::to_string(stage_) + " expected " + std::to_string(n));
    std::copy(m.data.begin(), m.data.end(), data);
    return Status::ok();
  }

 private:
  Status push(int to, Message m) {
    if (to < 0 || to >= stages_ || to == stage_) return invalid_argument("stage channel: no stage " + std::to_string(to) + " to send to");
    {
      std::lock_guard lk(p_->mu);
      p_->queues[{stage_, to}].push_back(std::move(m));
    }
    p_->cv.notify_all();
    return Status::ok();
  }
  std::shared_ptr<PipeState> p_;
  int stage_, stages_;
};

// Global stage numbers over a node's in-process endpoint (local numbers) and its links to the
// neighbouring nodes' stages.
class SplicedStageChannel final : public StageChannel {
 public:
  SplicedStageChannel(std::unique_ptr<StageChannel> local, int first, int stage, int stages, std::unique_ptr<StageChannel> up,
                      std::unique_ptr<StageChannel> down)
      : local_(std::move(local)), up_(std::move(up)), down_(std::move(down)), first_(first), stage_(stage), stages_(stages) {}
  int stage() const override { return stage_; }
  int num_stages() const override { return stages_; }
  Status send(int to, const float* data, int64_t n) override {
    PDS_ASSIGN_OR_RETURN(StageChannel * c, route(to));
    return c->send(c == local_.get() ? to - first_ : to, data, n);
  }
  Status send_failure(int to, const Status& why) override {
    PDS_ASSIGN_OR_RETURN(StageChannel * c, route(to));
    return c->send_failure(c == local_.get() ? to - first_ : to, why);
  }
  Status recv(int from, float* data, int64_t n) override {
    PDS_ASSIGN_OR_RETURN(StageChannel * c, route(from));
    return c->recv(c == local_.get() ? from - first_ : from, data, n);
  }

 private:
  Result<StageChannel*> route(int s) {
    if (s >= first_ && s < first_ + local_->num_stages()) return local_.get();
    if (s == first_ - 1 && up_) return up_.get();
    if (s == first_ + local_->num_stages() && down_) return down_.get();
    return invalid_argument("stage channel: stage " + std::to_string(stage_) + " has no link to stage " + std::to_string(s));
  }
  std::unique_ptr<StageChannel> local_, up_, down_;
  int first_, stage_, stages_;
};

}  // namespace

std::unique_ptr<StageChannel> make_spliced_stage_channel(std::unique_ptr<StageChannel> local, int first, int stage, int num_stages,
                                                         std::unique_ptr<StageChannel> up, std::unique_ptr<StageChannel> down) {
  return std::make_unique<SplicedStageChannel>(std::move(local), first, stage, num_stages, std::move(up), std::move(down));
}

std::vector<std::unique_ptr<StageChannel>> make_in_process_pipeline(int stages) {
  auto p = std::make_shared<PipeState>();
  std::vector<std::unique_ptr<StageChannel>> out;
  for (int s = 0; s < stages; ++s) out.push_back(std::make_unique<InProcessStageChannel>(p, s, stages));
  return out;
}

RoundAgreement agree_round(const std::vector<std::vector<StageSeqState>>& reports) {
  RoundAgreement a;
  const size_t n = reports.empty() ? 0 : reports[0].size();
  a.ready.assign(n, reports.empty() ? 0 : 1);
  a.failed.assign(n, 0);
  for (const auto& stage : reports)
    for (size_t i = 0; i < n; ++i) {
      const StageSeqState s = i < stage.size() ? stage[i] : StageSeqState::kPending;
      if (s != StageSeqState::kReady) a.ready[i] = 0;
      if (s == StageSeqState::kFailed) a.failed[i] = 1;
    }
  for (size_t i = 0; i < n; ++i)
    if (a.failed[i]) a.ready[i] = 0;
  return a;
}

}  // namespace pdserve
