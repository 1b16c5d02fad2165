// The server's request scheduler (CoSine's Algorithm 2 over the pool of active
// requests): who joins the next verification pass, with what γ and how many
// drafters; refused requests are admitted after max_wait refusals.
#include <gtest/gtest.h>

#include "core/error.h"
#include "serve/request_scheduler.h"

namespace parspec {
namespace {

// L(n) = 9 + n ms up to n = 32, no overheads; a draft token costs 1 ms.
SchedulerOptions options_with(ScheduleBounds bounds, int max_wait = 4) {
  SchedulerOptions o;
  for (int n = 1; n <= 32; ++n) o.model.target_ms.push_back(9.0 + n);
  o.model.draft_token_ms = 1;
  o.bounds = bounds;
  o.max_wait = max_wait;
  return o;
}

TEST(RequestScheduler, WithoutBoundsEveryRequestJoinsAndDraftersAreShared) {
  RequestScheduler s(options_with({}));
  const int a = s.add(), b = s.add(), c = s.add();
  // Alone in the pool: the whole batch, every drafter.
  StepDecision d = s.plan(a, {10, 4, 0}, 4, 0);
  EXPECT_TRUE(d.admitted);
  EXPECT_EQ(d.batch, 1);
  EXPECT_EQ(d.gamma, 4);
  EXPECT_EQ(d.drafters, 4);
  // Three in the pool: T_ttl/b falls with b (L is sublinear per row), so all
  // three form the batch and share the four drafters (ceil(4/3) = 2 each).
  s.plan(b, {20, 4, 0}, 4, 1);
  d = s.plan(c, {30, 4, 0}, 4, 1);
  EXPECT_TRUE(d.admitted);
  EXPECT_EQ(d.batch, 3);
  EXPECT_EQ(d.gamma_total, 12);
  EXPECT_EQ(d.drafters, 2);
  EXPECT_DOUBLE_EQ(d.t_ttl_ms, 4 + 9 + 15);  // max T_ssm + L(b + Γ)
  const RequestScheduler::Stats st = s.stats();
  EXPECT_EQ(st.admitted, 3);
  EXPECT_EQ(st.refused, 0);
  EXPECT_EQ(st.last_batch, 3);
  EXPECT_EQ(st.last_drafters, 2);
}

TEST(RequestScheduler, GammaMaxCutsTheBatchsDraftTokens) {
  RequestScheduler s(options_with({.gamma_max = 7}));
  const int a = s.add(), b = s.add();
  s.plan(a, {10, 5, 0}, 2, 0);
  // Both in the pool now (the pool changed: chosen again); adaptive
  // speculation cuts the largest γ first: {5, 3} → {4, 3}.
  const StepDecision db = s.plan(b, {10, 3, 0}, 2, 0);
  const StepDecision da = s.plan(a, {10, 5, 0}, 2, 0);
  EXPECT_EQ(db.gamma, 3);
  EXPECT_EQ(da.gamma, 4);
  EXPECT_EQ(da.gamma_total, 7);
}

TEST(RequestScheduler, LatencyBoundLeavesRequestsWaitingUntilMaxWait) {
  // One request: 4 draft tokens + L(5) = 18 ms; two: 4 + L(10) = 23 ms > T_max.
  RequestScheduler s(options_with({.max_latency_ms = 20}, /*max_wait=*/2));
  const int a = s.add(), b = s.add();
  EXPECT_TRUE(s.plan(a, {10, 4, 0}, 2, 0).admitted);
  // b joins: the batch is chosen again; the two do not fit, a alone wins the tie.
  StepDecision d = s.plan(b, {10, 4, 0}, 2, 0);
  EXPECT_FALSE(d.admitted);
  // It drafts for a later pass as if beside the chosen batch.
  EXPECT_EQ(d.gamma, 4);
  EXPECT_EQ(d.batch, 2);
  d = s.plan(b, {10, 4, 0}, 2, 1);
  EXPECT_FALSE(d.admitted);
  // The third ask in a row is admitted beside the chosen batch.
  d = s.plan(b, {10, 4, 0}, 2, 2);
  EXPECT_TRUE(d.admitted);
  EXPECT_TRUE(d.forced);
  EXPECT_EQ(d.batch, 2);
  EXPECT_EQ(d.gamma, 4);
  EXPECT_EQ(d.drafters, 1);
  const RequestScheduler::Stats st = s.stats();
  EXPECT_EQ(st.refused, 2);
  EXPECT_EQ(st.forced, 1);
  EXPECT_EQ(st.decisions, 4);  // epoch 0 twice (the pool changed), epochs 1 and 2
  // The count starts again after an admission.
  EXPECT_FALSE(s.plan(b, {10, 4, 0}, 2, 3).admitted);
}

TEST(RequestScheduler, LeavingTheBatchLetsTheWaitingIn) {
  RequestScheduler s(options_with({.max_latency_ms = 20}));
  const int a = s.add(), b = s.add();
  s.plan(a, {50, 4, 0}, 2, 0);
  // Only one fits T_max; equal objectives go to the lower index: a.
  EXPECT_FALSE(s.plan(b, {10, 4, 0}, 2, 1).admitted);
  s.remove(a);
  const StepDecision d = s.plan(b, {10, 4, 0}, 2, 1);
  EXPECT_TRUE(d.admitted);
  EXPECT_FALSE(d.forced);
}

TEST(RequestScheduler, MemoryBoundKeepsTheBatchWithinMmax) {
  RequestScheduler s(options_with({.max_memory = 100}));
  const int a = s.add(), b = s.add(), c = s.add();
  s.plan(a, {10, 2, 75}, 2, 0);
  s.plan(b, {10, 2, 30}, 2, 0);
  // Of the batches of two only {b, c} stays within 100 MiB (a with either is
  // over), and it beats every batch of one.
  const StepDecision dc = s.plan(c, {10, 2, 50}, 2, 0);
  EXPECT_TRUE(dc.admitted);
  EXPECT_EQ(dc.batch, 2);
  EXPECT_FALSE(s.plan(a, {10, 2, 75}, 2, 0).admitted);
  EXPECT_TRUE(s.plan(b, {10, 2, 30}, 2, 0).admitted);
}

TEST(RequestScheduler, RequestsThatHaveNotAskedAreNotInThePool) {
  RequestScheduler s(options_with({}));
  const int a = s.add();
  s.add();  // still in its prefill
  const StepDecision d = s.plan(a, {10, 3, 0}, 4, 0);
  EXPECT_EQ(d.batch, 1);
  EXPECT_EQ(d.drafters, 4);
  EXPECT_THROW(s.plan(99, {10, 3, 0}, 4, 0), Error);
}

}  // namespace
}  // namespace parspec
