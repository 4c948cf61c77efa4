// Pipeline parallelism on the CPU backend: the stage split, the channel, the agreement rule,
// and PP (x TP) forwards that must equal the one-stage forward bit for bit (micro-batches
// carry whole sequences, so no row's arithmetic changes), stage caches that gather into the
// whole-model layout the transfer layer reads, and a stage failing one request mid-flight.
#include <gtest/gtest.h>

#include <cstring>

#include "../ops/test_rng.h"
#include "pdserve/model/pipeline.h"
#include "pdserve/model/tp_group.h"
#include "test_models.h"

namespace pdserve {
namespace {

using testing::random_ids;

ModelConfig config_of(const std::string& preset) {
  auto c = load_model_config(testing::tiny_model_dir(preset));
  EXPECT_TRUE(c.is_ok());
  return *c;
}

TEST(PipelineStages, ContiguousCoverEveryLayerAndMinimiseTheBottleneck) {
  for (const std::string preset : {"tiny-k3", "tiny-kimi-linear"}) {
    const ModelConfig c = config_of(preset);
    for (int pp = 1; pp <= c.num_layers; ++pp) {
      auto st = plan_pipeline_stages(c, pp);
      ASSERT_TRUE(st.is_ok()) << st.status().message();
      ASSERT_EQ(static_cast<int>(st->size()), pp);
      int64_t next = 0;
      double worst = 0;
      for (const LayerSpan& s : *st) {
        EXPECT_EQ(s.begin, next);
        EXPECT_GT(s.end, s.begin);
        next = s.end;
        double sum = 0;
        for (int64_t i = s.begin; i < s.end; ++i) sum += layer_cost(c, i);
        worst = std::max(worst, sum);
      }
      EXPECT_EQ(next, c.num_layers);
      if (pp == 2) {  // every two-way split: none has a cheaper bottleneck
        for (int64_t cut = 1; cut < c.num_layers; ++cut) {
          double a = 0, b = 0;
          for (int64_t i = 0; i < c.num_layers; ++i) (i < cut ? a : b) += layer_cost(c, i);
          EXPECT_LE(worst, std::max(a, b) * (1 + 1e-9)) << preset << " cut " << cut;
        }
      }
    }
  }
}

TEST(PipelineStages, CostsDifferByLayerKind) {
  const ModelConfig c = config_of("tiny-k3");
  // tiny-k3: layer 0 dense MLP, MLA at layers 2 and 5 (0-based), the rest KDA + MoE.
  EXPECT_NE(layer_cost(c, 0), layer_cost(c, 1));
  EXPECT_NE(layer_cost(c, 2), layer_cost(c, 1));
}

TEST(PipelineStages, RefusesMoreStagesThanLayersNamingTheFlag) {
  const ModelConfig c = config_of("tiny-k3");
  auto st = plan_pipeline_stages(c, static_cast<int>(c.num_layers) + 1, "--prefill-pp");
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.status().message().find("--prefill-pp"), std::string::npos) << st.status().message();
  EXPECT_FALSE(plan_pipeline_stages(c, 0).is_ok());
  auto g = TpModelGroup::load_models(testing::tiny_model_dir("tiny-k3"), 1, static_cast<int>(c.num_layers) + 1);
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("--pp"), std::string::npos);
}

TEST(StageChannel, InOrderFailuresAndSizeChecks) {
  auto p = make_in_process_pipeline(3);
  const float a[3] = {1, 2, 3}, b[2] = {4, 5};
  ASSERT_TRUE(p[0]->send(1, a, 3).is_ok());
  ASSERT_TRUE(p[0]->send(1, b, 2).is_ok());
  ASSERT_TRUE(p[1]->send_failure(2, Status(ErrorCode::kUnavailable, "stage 1 lost it")).is_ok());
  float got[3];
  ASSERT_TRUE(p[1]->recv(0, got, 3).is_ok());
  EXPECT_EQ(got[2], 3);
  EXPECT_FALSE(p[1]->recv(0, got, 3).is_ok());  // 2 floats sent, 3 expected
  Status f = p[2]->recv(1, got, 3);
  EXPECT_EQ(f.code(), ErrorCode::kUnavailable);
  EXPECT_FALSE(p[0]->send(0, a, 1).is_ok());  // not to itself
}

TEST(StageAgreement, ReadyIsTheIntersectionFailedIsTheUnion) {
  using S = StageSeqState;
  const RoundAgreement a = agree_round({{S::kReady, S::kReady, S::kFailed, S::kReady},
                                        {S::kReady, S::kFailed, S::kReady, S::kPending},
                                        {S::kReady, S::kReady, S::kFailed, S::kReady}});
  EXPECT_EQ(a.ready, (std::vector<uint8_t>{1, 0, 0, 0}));
  EXPECT_EQ(a.failed, (std::vector<uint8_t>{0, 1, 1, 0}));  // the pending one waits
  EXPECT_TRUE(agree_round({}).ready.empty());
}

struct PpRun {
  std::vector<std::vector<float>> prefill_logits;  // per sequence, all positions
  std::vector<std::vector<int32_t>> greedy;        // per sequence
  std::unique_ptr<TpModelGroup> group;
  std::vector<SequenceInput> seqs;
};

int32_t argmax(const float* row, int64_t vocab) {
  int32_t best = 0;
  for (int64_t v = 1; v < vocab; ++v)
    if (row[v] > row[best]) best = static_cast<int32_t>(v);
  return best;
}

// Three sequences of different lengths prefilled together in chunks of 24, then decoded
// greedily together: each round is one multi-sequence batch, so micro-batches form.
PpRun run(const std::string& preset, int tp, int pp, int steps, DType kv_dtype = DType::kF32) {
  PpRun out;
  auto g = TpModelGroup::load(testing::tiny_model_dir(preset), tp, 32, 16, 4, pp);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  out.group = std::move(g).value();
  if (kv_dtype != DType::kF32) out.group->make_pools(32, 16, 4, kv_dtype);
  const std::vector<std::vector<int32_t>> prompts = {random_ids(61, 31), random_ids(17, 32), random_ids(40, 33)};
  const int64_t vocab = out.group->config().vocab_size;
  out.prefill_logits.resize(prompts.size());
  out.greedy.resize(prompts.size());
  for (size_t s = 0; s < prompts.size(); ++s) {
    SequenceInput in;
    in.pages = *out.group->allocate_pages(6);
    in.state_slot = *out.group->allocate_slot();
    out.seqs.push_back(in);
  }
  for (size_t done = 0; done < 61; done += 24) {
    ForwardBatch b;
    std::vector<size_t> who;
    for (size_t s = 0; s < prompts.size(); ++s) {
      if (done >= prompts[s].size()) continue;
      SequenceInput in = out.seqs[s];
      in.tokens.assign(prompts[s].begin() + done, prompts[s].begin() + std::min(prompts[s].size(), done + 24));
      in.cached_len = static_cast<int64_t>(done);
      in.all_logits = true;
      b.seqs.push_back(in);
      who.push_back(s);
    }
    ForwardOutput fo;
    Status st = out.group->forward(b, &fo);
    EXPECT_TRUE(st.is_ok()) << st.message();
    for (size_t j = 0; j < who.size(); ++j) {
      EXPECT_FALSE(fo.seq_failed(j));
      const float* r = fo.row(j, 0);
      out.prefill_logits[who[j]].insert(out.prefill_logits[who[j]].end(), r, r + fo.num_rows[j] * vocab);
    }
  }
  std::vector<int32_t> next(prompts.size());
  for (size_t s = 0; s < prompts.size(); ++s) {
    next[s] = argmax(&out.prefill_logits[s][out.prefill_logits[s].size() - vocab], vocab);
    out.seqs[s].cached_len = static_cast<int64_t>(prompts[s].size());
  }
  for (int i = 0; i < steps; ++i) {
    ForwardBatch b;
    for (size_t s = 0; s < prompts.size(); ++s) {
      out.greedy[s].push_back(next[s]);
      SequenceInput in = out.seqs[s];
      in.tokens = {next[s]};
      b.seqs.push_back(in);
    }
    ForwardOutput fo;
    EXPECT_TRUE(out.group->forward(b, &fo).is_ok());
    for (size_t s = 0; s < prompts.size(); ++s) {
      out.seqs[s].cached_len += 1;
      next[s] = argmax(fo.row(s), vocab);
    }
  }
  return out;
}

class PipelineEquality : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineEquality, Pp2AndPp3EqualPp1BitForBit) {
  const std::string preset = GetParam();
  PpRun pp1 = run(preset, 1, 1, 8);
  for (int pp : {2, 3}) {
    PpRun other = run(preset, 1, pp, 8);
    for (size_t s = 0; s < pp1.seqs.size(); ++s) {
      EXPECT_EQ(other.prefill_logits[s], pp1.prefill_logits[s]) << preset << " PP" << pp << " sequence " << s;
      EXPECT_EQ(other.greedy[s], pp1.greedy[s]) << preset << " PP" << pp << " sequence " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, PipelineEquality, ::testing::Values("tiny-k3", "tiny-k3-wide", "tiny-kimi-linear"));

TEST(PipelineParallel, Pp2xTp2EqualsTp2BitForBitAndPp1WithinNoise) {
  PpRun tp2 = run("tiny-k3-wide", 2, 1, 6);
  PpRun both = run("tiny-k3-wide", 2, 2, 6);
  PpRun one = run("tiny-k3-wide", 1, 1, 6);
  for (size_t s = 0; s < tp2.seqs.size(); ++s) {
    EXPECT_EQ(both.prefill_logits[s], tp2.prefill_logits[s]) << "sequence " << s;
    EXPECT_EQ(both.greedy[s], one.greedy[s]) << "sequence " << s;
    EXPECT_LT(testing::normalized_error(both.prefill_logits[s], one.prefill_logits[s]), 2e-5);
  }
}

TEST(PipelineParallel, StageCachesGatherIntoTheWholeModelLayout) {
  PpRun pp1 = run("tiny-k3", 1, 1, 3);
  PpRun pp3 = run("tiny-k3", 1, 3, 3);
  // Each stage holds only its own layers.
  int64_t mla = 0, kda = 0;
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(pp3.group->stage_kv(s, 0).num_layers(), pp3.group->stage_model(s, 0).stage_mla_layers());
    mla += pp3.group->stage_kv(s, 0).num_layers();
    kda += pp3.group->stage_state(s, 0).num_layers();
  }
  EXPECT_EQ(mla, pp1.group->kv(0).num_layers());
  EXPECT_EQ(kda, pp1.group->state(0).num_layers());
  for (size_t s = 0; s < pp1.seqs.size(); ++s) {
    const SequenceInput& q = pp3.seqs[s];
    ASSERT_TRUE(pp3.group->cache_to_host(CacheRegion{q.pages, q.state_slot}).is_ok());
    const MlaKvPool& a = pp1.group->kv(0);
    const MlaKvPool& b = pp3.group->kv(0);
    for (int64_t l = 0; l < a.num_layers(); ++l)
      for (int32_t p : q.pages)
        EXPECT_EQ(std::memcmp(a.layer_base(l) + p * a.page_floats(), b.layer_base(l) + p * b.page_floats(), a.page_floats() * sizeof(float)), 0)
            << "MLA layer " << l << " page " << p;
    const KdaStatePool& sa = pp1.group->state(0);
    const KdaStatePool& sb = pp3.group->state(0);
    EXPECT_EQ(std::memcmp(sa.slot_base(q.state_slot), sb.slot_base(q.state_slot), sa.slot_floats() * sizeof(float)), 0) << "sequence " << s;
  }
}

// kv_cache_dtype bfloat16: every stage pool is bf16, the stages' pages gather into the whole
// model's bf16 layout byte for byte, and PP3 equals PP1 bit for bit as with fp32.
TEST(PipelineParallel, Bf16StagePoolsEqualPp1AndGatherByteForByte) {
  PpRun pp1 = run("tiny-k3", 1, 1, 2, DType::kBF16);
  PpRun pp3 = run("tiny-k3", 1, 3, 2, DType::kBF16);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(pp3.group->stage_kv(s, 0).dtype(), DType::kBF16);
  for (size_t s = 0; s < pp1.seqs.size(); ++s) {
    EXPECT_EQ(pp3.prefill_logits[s], pp1.prefill_logits[s]) << "sequence " << s;
    EXPECT_EQ(pp3.greedy[s], pp1.greedy[s]) << "sequence " << s;
    const SequenceInput& q = pp3.seqs[s];
    ASSERT_TRUE(pp3.group->cache_to_host(CacheRegion{q.pages, q.state_slot}).is_ok());
    const MlaKvPool& a = pp1.group->kv(0);
    const MlaKvPool& b = pp3.group->kv(0);
    ASSERT_EQ(b.dtype(), DType::kBF16);
    for (int64_t l = 0; l < a.num_layers(); ++l)
      for (int32_t p : q.pages)
        EXPECT_EQ(std::memcmp(a.page_ptr(l, p), b.page_ptr(l, p), static_cast<size_t>(a.page_bytes())), 0) << "MLA layer " << l << " page " << p;
  }
}

TEST(PipelineParallel, AStageFailingOneRequestFailsItEverywhereAndOthersContinue) {
  PpRun ref = run("tiny-k3", 1, 1, 0);
  auto g = TpModelGroup::load(testing::tiny_model_dir("tiny-k3"), 1, 32, 16, 4, 3);
  ASSERT_TRUE(g.is_ok());
  TpModelGroup& grp = **g;
  const std::vector<std::vector<int32_t>> prompts = {random_ids(61, 31), random_ids(17, 32), random_ids(40, 33)};
  ForwardBatch b;
  for (size_t s = 0; s < prompts.size(); ++s) {
    SequenceInput in;
    in.pages = *grp.allocate_pages(6);
    in.state_slot = *grp.allocate_slot();
    in.tokens.assign(prompts[s].begin(), prompts[s].begin() + std::min<size_t>(24, prompts[s].size()));
    in.all_logits = true;
    b.seqs.push_back(in);
  }
  // Stage 1 of 3 drops the second request after running it (stages 0 and 2 are fine).
  const int32_t doomed = b.seqs[1].state_slot;
  grp.set_stage_fault([&](int stage, const SequenceInput& seq) {
    return stage == 1 && seq.state_slot == doomed ? Status(ErrorCode::kUnavailable, "stage 1 lost its activations") : Status::ok();
  });
  ForwardOutput fo;
  ASSERT_TRUE(grp.forward(b, &fo).is_ok());
  ASSERT_EQ(fo.seq_status.size(), 3u);
  EXPECT_TRUE(fo.seq_failed(1));
  EXPECT_EQ(fo.seq_status[1].code(), ErrorCode::kUnavailable);
  const int64_t vocab = grp.config().vocab_size;
  for (size_t s : {size_t{0}, size_t{2}}) {
    EXPECT_FALSE(fo.seq_failed(s));
    std::vector<float> got(fo.row(s, 0), fo.row(s, 0) + fo.num_rows[s] * vocab);
    std::vector<float> want(ref.prefill_logits[s].begin(), ref.prefill_logits[s].begin() + fo.num_rows[s] * vocab);
    EXPECT_EQ(got, want) << "sequence " << s;
  }
  // Freeing the failed request frees its pages and slot on every stage.
  const int64_t pages_before = grp.stage_kv(2, 0).used_pages();
  ASSERT_TRUE(grp.free_pages(b.seqs[1].pages).is_ok());
  ASSERT_TRUE(grp.free_slot(b.seqs[1].state_slot).is_ok());
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(grp.stage_kv(s, 0).used_pages(), pages_before - 6) << "stage " << s;
    EXPECT_EQ(grp.stage_state(s, 0).used_slots(), 2) << "stage " << s;
  }
  EXPECT_EQ(grp.kv(0).used_pages(), pages_before - 6);
  // The survivors continue: their next chunk runs with no fault.
  grp.set_stage_fault({});
  ForwardBatch next;
  for (size_t s : {size_t{0}, size_t{2}}) {
    SequenceInput in = b.seqs[s];
    in.cached_len = 24;
    in.tokens.assign(prompts[s].begin() + 24, prompts[s].begin() + std::min<size_t>(48, prompts[s].size()));
    in.all_logits = false;
    next.seqs.push_back(in);
  }
  ForwardOutput fo2;
  ASSERT_TRUE(grp.forward(next, &fo2).is_ok());
  for (size_t j = 0; j < 2; ++j) {
    const size_t s = j == 0 ? 0 : 2;
    const int64_t last = std::min<int64_t>(48, static_cast<int64_t>(prompts[s].size())) - 1;
    std::vector<float> got(fo2.row(j), fo2.row(j) + vocab);
    std::vector<float> want(ref.prefill_logits[s].begin() + last * vocab, ref.prefill_logits[s].begin() + (last + 1) * vocab);
    EXPECT_EQ(got, want) << "sequence " << s;
  }
}

// Stages in two groups, as on two nodes (node 0: stage 0; node 1: stages 1 and 2 of 3), joined
// by stand-ins for the network links; node 0's round collector runs node 1's round and takes
// its verdicts and logits, as kRound carries them. Logits equal one process's; a sequence that
// node 1's last stage fails fails on node 0 too (the union), one node 0 fails fails although
// node 1 ran it fine, and the others are unaffected.
TEST(PipelineParallel, StagesOnTwoNodesAgreeOverTheRoundCollector) {
  PpRun ref = run("tiny-k3", 1, 1, 0);
  const std::string dir = testing::tiny_model_dir("tiny-k3");
  auto n0 = TpModelGroup::load_stage_models(dir, 1, 3, 0, 1);
  auto n1 = TpModelGroup::load_stage_models(dir, 1, 3, 1, 2);
  ASSERT_TRUE(n0.is_ok() && n1.is_ok());
  TpModelGroup& leader = **n0;
  TpModelGroup& follower = **n1;
  EXPECT_FALSE(leader.holds_last_stage());
  EXPECT_TRUE(follower.holds_last_stage());
  EXPECT_EQ(follower.first_stage(), 1);
  leader.make_pools(32, 16, 4);
  follower.make_pools(32, 16, 4);  // no accounting there: the leader's page and slot ids drive it
  auto wire = make_in_process_pipeline(3);  // endpoint 0 -> 1 stands in for the TCP link
  std::vector<std::unique_ptr<StageChannel>> down, up;
  down.push_back(std::move(wire[0]));
  up.push_back(std::move(wire[1]));
  ASSERT_TRUE(leader.link_stages({}, std::move(down)).is_ok());
  ASSERT_TRUE(follower.link_stages(std::move(up), {}).is_ok());
  leader.set_round_collector([&](const ForwardBatch& b, std::vector<TpModelGroup::RemoteRound>* remote) {
    ForwardOutput fo;
    PDS_RETURN_IF_ERROR(follower.forward(b, &fo));
    remote->push_back({fo.seq_status, fo.logits});
    return Status::ok();
  });
  const std::vector<std::vector<int32_t>> prompts = {random_ids(61, 31), random_ids(17, 32), random_ids(40, 33)};
  ForwardBatch b;
  for (size_t s = 0; s < prompts.size(); ++s) {
    SequenceInput in;
    in.pages = *leader.allocate_pages(6);
    in.state_slot = *leader.allocate_slot();
    in.tokens.assign(prompts[s].begin(), prompts[s].begin() + std::min<size_t>(24, prompts[s].size()));
    in.all_logits = true;
    b.seqs.push_back(in);
  }
  const int32_t failed_there = b.seqs[1].state_slot, failed_here = b.seqs[2].state_slot;
  follower.set_stage_fault([&](int stage, const SequenceInput& seq) {
    return stage == 2 && seq.state_slot == failed_there ? Status(ErrorCode::kUnavailable, "stage 2 lost it") : Status::ok();
  });
  leader.set_stage_fault([&](int stage, const SequenceInput& seq) {
    return stage == 0 && seq.state_slot == failed_here ? Status(ErrorCode::kAborted, "stage 0 dropped it") : Status::ok();
  });
  ForwardOutput fo;
  ASSERT_TRUE(leader.forward(b, &fo).is_ok());
  ASSERT_EQ(fo.seq_status.size(), 3u);
  EXPECT_FALSE(fo.seq_failed(0));
  const int64_t vocab = leader.config().vocab_size;
  std::vector<float> got(fo.row(0, 0), fo.row(0, 0) + fo.num_rows[0] * vocab);
  std::vector<float> want(ref.prefill_logits[0].begin(), ref.prefill_logits[0].begin() + fo.num_rows[0] * vocab);
  EXPECT_EQ(got, want);
  EXPECT_EQ(fo.seq_status[1].message(), "stage 2 lost it");
  EXPECT_EQ(fo.seq_status[2].message(), "stage 0 dropped it");
  // A collector that fails (the other node gone) breaks the group for good.
  leader.set_round_collector([](const ForwardBatch&, std::vector<TpModelGroup::RemoteRound>*) { return Status(ErrorCode::kUnavailable, "node 1 left"); });
  leader.set_stage_fault({});
  Status st = leader.forward(b, &fo);
  EXPECT_NE(st.message().find("lost one of its nodes"), std::string::npos) << st.message();
  EXPECT_FALSE(leader.health().is_ok());
}

TEST(PipelineParallel, AStageWithoutAChannelIsRefused) {
  auto m = Model::load(testing::tiny_model_dir("tiny-k3"), {}, nullptr, LayerSpan{0, 2});
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_FALSE((*m)->last_stage());
  auto kv = std::make_unique<MlaKvPool>((*m)->stage_mla_layers(), 4, 16, (*m)->config().mla_cache_dim());
  ModelCaches caches{kv.get(), nullptr};
  ForwardOutput fo;
  Status st = (*m)->forward(ForwardBatch{}, caches, &fo);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdserve
