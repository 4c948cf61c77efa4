// TpModelGroup with pp > 1: the micro-batched pipeline round, the stages' agreement on each
// sequence, and the copies between the stages' pools and the whole-model pools.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "pdserve/model/tp_group.h"

namespace pdserve {

namespace {

// Contiguous groups of whole sequences with about equal token counts, at most `n` groups.
// Whole sequences keep every row's arithmetic what it is without a pipeline (a sequence
// never meets another sequence's rows), so PP logits equal PP1 logits bit for bit.
std::vector<std::vector<size_t>> split_micro_batches(const ForwardBatch& batch, int n) {
  int64_t total = 0;
  for (const auto& s : batch.seqs) total += static_cast<int64_t>(s.tokens.size());
  const size_t groups = std::min(batch.seqs.size(), static_cast<size_t>(std::max(1, n)));
  std::vector<std::vector<size_t>> out(1);
  int64_t acc = 0;
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    // Start a new group once this one has its share, leaving one sequence for each later group.
    const bool full = acc * static_cast<int64_t>(groups) >= total * static_cast<int64_t>(out.size());
    const bool room = batch.seqs.size() - i >= groups - out.size() + 1;
    if (!out.back().empty() && out.size() < groups && (full || !room)) out.emplace_back();
    out.back().push_back(i);
    acc += static_cast<int64_t>(batch.seqs[i].tokens.size());
  }
  return out;
}

}  // namespace

Status TpModelGroup::forward_pipeline(const ForwardBatch& batch, ForwardOutput* out, const ForwardOptions& opts) {
  // Validate every rank up front: a rank that refused a batch would leave its stage's
  // collectives waiting (the stage channels carry failures, collectives do not).
  for (int s = 0; s < pp_; ++s)
    for (int r = 0; r < tp_; ++r)
      PDS_RETURN_IF_ERROR(stage_model(s, r).validate(batch, ModelCaches{&stage_kv(s, r), &stage_state(s, r)}));
  PDS_RETURN_IF_ERROR(health());
  // Stages on other nodes run the same batch (the leader sends it; followers have none).
  if (step_sender_) {
    if (Status st = step_sender_(batch); !st.is_ok()) return break_group(st);
  }
  const size_t n = batch.seqs.size();
  const auto groups = split_micro_batches(batch, micro_batches_);
  std::vector<std::vector<StageSeqState>> reports(static_cast<size_t>(pp_), std::vector<StageSeqState>(n, StageSeqState::kPending));
  std::vector<Status> why(n);
  std::mutex why_mu;
  std::vector<ForwardOutput> group_out(groups.size());
  std::vector<Status> rank_status(static_cast<size_t>(pp_ * tp_));

  const bool device = !devices_.empty();
  auto run_rank = [&](int s, int r) {
    ModelCaches caches{&stage_kv(s, r), &stage_state(s, r)};
    ForwardOptions o = opts;
    o.channel = channels_[s * tp_ + r].get();
    // Device stages hold their own pools and pass activations themselves (their links).
    DeviceForward* dev = device ? devices_[s * tp_ + r].get() : nullptr;
    // GPipe fill/drain: micro-batches in order; stage s starts k as soon as s - 1 sent it.
    for (size_t k = 0; k < groups.size(); ++k) {
      ForwardBatch mb;
      for (size_t i : groups[k]) mb.seqs.push_back(batch.seqs[i]);
      ForwardOutput fo;
      Status st = dev ? dev->forward(mb, &fo) : stage_model(s, r).forward(mb, caches, &fo, o);
      if (!st.is_ok()) rank_status[s * tp_ + r] = st;
      if (r != 0) continue;  // rank 0 of a stage speaks for the stage
      for (size_t j = 0; j < groups[k].size(); ++j) {
        const size_t i = groups[k][j];
        Status verdict = st;
        if (verdict.is_ok() && fault_) verdict = fault_(stage0_ + s, batch.seqs[i]);
        reports[s][i] = verdict.is_ok() ? StageSeqState::kReady : StageSeqState::kFailed;
        if (!verdict.is_ok()) {
          std::lock_guard lk(why_mu);
          if (why[i].is_ok()) why[i] = verdict;
        }
      }
      if (s == pp_ - 1 && st.is_ok()) group_out[k] = std::move(fo);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < pp_ * tp_; ++i) threads.emplace_back(run_rank, i / tp_, i % tp_);
  run_rank(0, 0);
  for (auto& t : threads) t.join();

  // The other nodes' stages: their verdicts join the agreement, the last one's logits are ours.
  std::vector<RemoteRound> remote;
  if (round_collector_) {
    if (Status st = round_collector_(batch, &remote); !st.is_ok()) return break_group(st);
  }
  // Lost a node during the round (a watcher broke the group): nothing of it counts.
  PDS_RETURN_IF_ERROR(health());
  const std::vector<float>* remote_logits = nullptr;
  for (RemoteRound& rr : remote) {
    if (rr.seq_status.size() != n) return break_group(internal_error("pipeline: another node reported on " + std::to_string(rr.seq_status.size()) + " of " + std::to_string(n) + " sequences"));
    std::vector<StageSeqState> rep(n);
    for (size_t i = 0; i < n; ++i) {
      rep[i] = rr.seq_status[i].is_ok() ? StageSeqState::kReady : StageSeqState::kFailed;
      if (!rr.seq_status[i].is_ok() && why[i].is_ok()) why[i] = rr.seq_status[i];
    }
    reports.push_back(std::move(rep));
    if (!rr.logits.empty()) remote_logits = &rr.logits;
  }
  if (!holds_last_stage() && round_collector_ && !remote_logits)
    return break_group(internal_error("pipeline: the node with the last stage sent no logits"));
  // The round's agreement: ready on every stage, failed on any.
  const RoundAgreement agreed = agree_round(reports);
  const int64_t vocab = config().vocab_size;
  out->vocab = vocab;
  out->logits.clear();
  out->first_row.assign(n, 0);
  out->num_rows.assign(n, 0);
  out->seq_status.assign(n, Status::ok());
  size_t failed = 0;
  for (size_t k = 0; k < groups.size(); ++k)
    for (size_t j = 0; j < groups[k].size(); ++j) {
      const size_t i = groups[k][j];
      const int64_t rows = batch.seqs[i].all_logits ? static_cast<int64_t>(batch.seqs[i].tokens.size()) : 1;
      out->first_row[i] = static_cast<int64_t>(out->logits.size()) / vocab;
      out->num_rows[i] = rows;
      if (!agreed.ready[i]) {
        ++failed;
        out->seq_status[i] = agreed.failed[i] ? why[i] : internal_error("pipeline: a stage did not report on a sequence");
        if (out->seq_status[i].is_ok()) out->seq_status[i] = internal_error("pipeline: a stage failed the sequence");
        out->logits.resize(out->logits.size() + static_cast<size_t>(rows * vocab), 0.0f);
        continue;
      }
      if (holds_last_stage()) {
        const ForwardOutput& g = group_out[k];
        const float* src = g.logits.data() + g.first_row[j] * vocab;
        out->logits.insert(out->logits.end(), src, src + rows * vocab);
      } else if (remote_logits) {  // laid out as ours: every row in batch order
        const size_t at = out->logits.size();
        if (remote_logits->size() < at + static_cast<size_t>(rows * vocab))
          return break_group(internal_error("pipeline: the last stage's node sent " + std::to_string(remote_logits->size()) + " logits, too few"));
        out->logits.insert(out->logits.end(), remote_logits->begin() + at, remote_logits->begin() + at + rows * vocab);
      } else {  // a follower before the last stage: its verdicts are what it reports
        out->logits.resize(out->logits.size() + static_cast<size_t>(rows * vocab), 0.0f);
      }
    }
  // Rows were appended in micro-batch order, which is batch order (groups are contiguous).
  // A follower reports every verdict (and has no engine to fail a step); the node with stage 0
  // fails the step when no sequence survived.
  if (failed == n && n > 0 && stage0_ == 0) {
    for (const Status& st : rank_status)
      if (!st.is_ok()) return st;
    return out->seq_status[0];
  }
  return Status::ok();
}

void TpModelGroup::move_stage_region(const CacheRegion& region, bool to_global) {
  const ModelConfig& c = config();
  for (int s = 0; s < pp_; ++s) {
    const LayerSpan& span = stage_model(s, 0).layers();
    // The stage's first MLA / KDA layer's index among all MLA / KDA layers.
    int64_t mla0 = 0, kda0 = 0;
    for (int64_t i = 0; i < span.begin; ++i) (c.layer_kinds[static_cast<size_t>(i)] == LayerKind::kMla ? mla0 : kda0)++;
    for (int r = 0; r < tp_; ++r) {
      MlaKvPool& sk = stage_kv(s, r);
      MlaKvPool& gk = kv(r);
      const size_t page_bytes = static_cast<size_t>(sk.page_bytes());  // both pools have one dtype (make_pools)
      for (int64_t l = 0; l < sk.num_layers(); ++l)
        for (int32_t p : region.pages) {
          uint8_t* stage_page = sk.page_ptr(l, p);
          uint8_t* global_page = gk.page_ptr(mla0 + l, p);
          std::memcpy(to_global ? global_page : stage_page, to_global ? stage_page : global_page, page_bytes);
        }
      if (region.slot < 0) continue;
      KdaStatePool& ss = stage_state(s, r);
      KdaStatePool& gs = state(r);
      // A slot is [kda layer][conv | recurrent]: the stage's layers are one contiguous run.
      float* stage_slot = ss.slot_base(region.slot);
      float* global_slot = gs.slot_base(region.slot) + kda0 * gs.layer_floats();
      const size_t bytes = static_cast<size_t>(ss.slot_floats()) * sizeof(float);
      if (bytes > 0) std::memcpy(to_global ? global_slot : stage_slot, to_global ? stage_slot : global_slot, bytes);
    }
  }
}

}  // namespace pdserve
