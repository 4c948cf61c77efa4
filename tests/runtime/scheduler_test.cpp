// The scheduler's steps on real pools, without a model.
#include "pdserve/runtime/scheduler.h"

#include <gtest/gtest.h>

namespace pdserve::runtime {
namespace {

struct Fixture {
  // 1 layer, page_size 4, tiny entries: only the accounting matters here.
  Fixture(int64_t pages, int64_t slots, SchedulerLimits lim)
      : kv(1, pages, 4, 1), state(1, slots, 1, 1, 2), sched(lim, kv, state) {}
  MlaKvPool kv;
  KdaStatePool state;
  Scheduler sched;
};

Sequence make_seq(uint64_t id, int64_t prompt, int64_t max_tokens) {
  Sequence s;
  s.id = id;
  s.tokens.assign(static_cast<size_t>(prompt), 1);
  s.prompt_len = prompt;
  s.max_tokens = max_tokens;
  return s;
}

// What the engine does after a forward: commit, then append a token to sampling sequences.
void run_step(Scheduler& s, const StepPlan& plan) {
  s.commit(plan);
  for (const StepItem& it : plan.items)
    if (it.samples) it.seq->tokens.push_back(7);
}

TEST(Scheduler, AdmissionReservesPromptPlusMaxTokens) {
  Fixture f(10, 4, {4, 100, 100});
  Sequence a = make_seq(1, 5, 6);  // 11 tokens -> 3 pages of 4
  f.sched.enqueue(&a);
  EXPECT_EQ(a.state, RequestState::kQueued);
  EXPECT_EQ(f.sched.admit(), 1);
  EXPECT_EQ(a.state, RequestState::kPrefill);
  EXPECT_EQ(a.pages.size(), 3u);
  EXPECT_GE(a.slot, 0);
  EXPECT_EQ(f.kv.used_pages(), 3);
  EXPECT_EQ(f.state.used_slots(), 1);
  ASSERT_TRUE(f.sched.release(&a).is_ok());
  EXPECT_EQ(a.state, RequestState::kFinished);
  EXPECT_EQ(f.kv.used_pages(), 0);
  EXPECT_EQ(f.state.used_slots(), 0);
  EXPECT_EQ(f.sched.num_running(), 0);
}

TEST(Scheduler, RequestThatCanNeverFitIsRefused) {
  Fixture f(3, 1, {4, 100, 100});
  EXPECT_TRUE(f.sched.check_fits(6, 6).is_ok());  // 12 tokens = 3 pages
  Status st = f.sched.check_fits(6, 7);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("KV pages"), std::string::npos);
}

TEST(Scheduler, WaitsForPagesSlotsAndRunningPlacesInArrivalOrder) {
  Fixture f(4, 2, {2, 100, 100});
  Sequence a = make_seq(1, 4, 4), b = make_seq(2, 4, 4), c = make_seq(3, 1, 1);
  f.sched.enqueue(&a);
  f.sched.enqueue(&b);
  f.sched.enqueue(&c);
  // a takes 2 pages, b 2 pages; c would fit a page but max_running = 2 and FCFS.
  EXPECT_EQ(f.sched.admit(), 2);
  EXPECT_EQ(c.state, RequestState::kQueued);
  EXPECT_EQ(f.sched.num_waiting(), 1);
  ASSERT_TRUE(f.sched.release(&a).is_ok());
  EXPECT_EQ(f.sched.admit(), 1);
  EXPECT_EQ(c.state, RequestState::kPrefill);
  ASSERT_TRUE(f.sched.release(&b).is_ok());
  ASSERT_TRUE(f.sched.release(&c).is_ok());
  EXPECT_EQ(f.kv.used_pages(), 0);
  EXPECT_EQ(f.state.used_slots(), 0);
}

TEST(Scheduler, HeadOfLineBlocksSmallerLaterRequests) {
  Fixture f(4, 4, {4, 100, 100});
  Sequence a = make_seq(1, 8, 4), big = make_seq(2, 8, 4), small = make_seq(3, 1, 1);
  f.sched.enqueue(&a);
  f.sched.enqueue(&big);
  f.sched.enqueue(&small);
  EXPECT_EQ(f.sched.admit(), 1);  // a holds 3 of 4 pages; big needs 3; small waits behind big
  EXPECT_EQ(small.state, RequestState::kQueued);
  ASSERT_TRUE(f.sched.release(&a).is_ok());
  EXPECT_EQ(f.sched.admit(), 2);
}

TEST(Scheduler, ChunkedPrefillSamplesOnlyAfterTheLastChunk) {
  Fixture f(100, 2, {2, 8, 100});
  Sequence a = make_seq(1, 20, 2);
  f.sched.enqueue(&a);
  f.sched.admit();
  std::vector<int64_t> chunks;
  for (;;) {
    StepPlan p = f.sched.plan();
    ASSERT_EQ(p.items.size(), 1u);
    chunks.push_back(p.items[0].count);
    const bool last = p.items[0].samples;
    run_step(f.sched, p);
    if (last) break;
    EXPECT_EQ(a.state, RequestState::kPrefill);
  }
  EXPECT_EQ(chunks, (std::vector<int64_t>{8, 8, 4}));
  EXPECT_EQ(a.state, RequestState::kDecode);
  EXPECT_EQ(a.cached_len, 20);
  StepPlan d = f.sched.plan();  // decode: the sampled token
  ASSERT_EQ(d.items.size(), 1u);
  EXPECT_EQ(d.items[0].begin, 20);
  EXPECT_EQ(d.items[0].count, 1);
  EXPECT_EQ(d.num_decode, 1);
}

TEST(Scheduler, StepMixesDecodesFirstThenPrefillUnderTheBudget) {
  Fixture f(100, 4, {4, 6, 10});
  Sequence a = make_seq(1, 3, 5), b = make_seq(2, 3, 5), c = make_seq(3, 30, 5);
  f.sched.enqueue(&a);
  f.sched.enqueue(&b);
  f.sched.admit();
  run_step(f.sched, f.sched.plan());  // prefill a and b fully (3 + 3 tokens)
  EXPECT_EQ(a.state, RequestState::kDecode);
  EXPECT_EQ(b.state, RequestState::kDecode);
  f.sched.enqueue(&c);
  f.sched.admit();
  StepPlan p = f.sched.plan();
  ASSERT_EQ(p.items.size(), 3u);
  EXPECT_EQ(p.items[0].seq, &a);
  EXPECT_EQ(p.items[1].seq, &b);
  EXPECT_EQ(p.items[2].seq, &c);
  EXPECT_EQ(p.items[2].count, 6);  // chunk size 6 < budget left 8
  EXPECT_FALSE(p.items[2].samples);
  EXPECT_EQ(p.num_tokens, 8);
  EXPECT_EQ(p.num_decode, 2);
  EXPECT_EQ(p.num_prefill, 1);

  Fixture g(100, 4, {4, 100, 5});  // budget 5: two decodes + 3 prefill tokens
  Sequence x = make_seq(1, 1, 5), y = make_seq(2, 1, 5), z = make_seq(3, 30, 5);
  g.sched.enqueue(&x);
  g.sched.enqueue(&y);
  g.sched.admit();
  run_step(g.sched, g.sched.plan());
  g.sched.enqueue(&z);
  g.sched.admit();
  StepPlan q = g.sched.plan();
  ASSERT_EQ(q.items.size(), 3u);
  EXPECT_EQ(q.items[2].count, 3);
  EXPECT_EQ(q.num_tokens, 5);
}

TEST(Scheduler, ReleasingAQueuedSequenceRemovesItFromTheQueue) {
  Fixture f(10, 1, {1, 100, 100});
  Sequence a = make_seq(1, 2, 2), b = make_seq(2, 2, 2);
  f.sched.enqueue(&a);
  f.sched.enqueue(&b);
  f.sched.admit();
  EXPECT_EQ(f.sched.num_waiting(), 1);
  ASSERT_TRUE(f.sched.release(&b).is_ok());  // aborted while queued: holds nothing
  EXPECT_EQ(f.sched.num_waiting(), 0);
  EXPECT_EQ(b.state, RequestState::kFinished);
  ASSERT_TRUE(f.sched.release(&a).is_ok());
  EXPECT_EQ(f.kv.free_pages(), 10);
}

}  // namespace
}  // namespace pdserve::runtime
