// The engine's step planner without a model: admission under a KV page
// budget (FIFO, max_num_seqs), chunked prefill sharing a step with decodes,
// speculation rows counted in the token budget, a sequence that finishes
// mid-step giving its pages to a waiting one, and cancellation.
#include "runtime/scheduler.h"

#include <gtest/gtest.h>

#include <memory>

#include "base/error.h"

namespace blockspec {
namespace {

std::unique_ptr<SeqState> seq(uint64_t id, int64_t prompt, int64_t max_tokens, bool may_draft = false) {
  auto s = std::make_unique<SeqState>();
  s->id = id, s->prompt_len = prompt, s->max_tokens = max_tokens, s->may_draft = may_draft;
  return s;
}

// A running sequence past its prompt, `generated` tokens out.
void decoding(SeqState& s, int64_t generated) {
  s.n_prefilled = s.prompt_len;
  s.n_generated = generated;
}

SchedulerOptions options(int64_t max_seqs, int64_t step_tokens, int64_t max_draft = 0) {
  SchedulerOptions o;
  o.max_num_seqs = max_seqs, o.max_step_tokens = step_tokens, o.page_tokens = 16, o.max_model_len = 256;
  o.max_draft = max_draft;
  return o;
}

const auto kNoDraft = [](int64_t) -> int64_t { return 0; };

TEST(Scheduler, AdmitsFifoWhileThePagesOfTheWorstCaseAreFree) {
  BlockAllocator pages(10);
  Scheduler s(options(8, 256), pages);
  auto a = seq(1, 30, 30), b = seq(2, 30, 34), c = seq(3, 10, 6);  // 4, 4 and 1 pages
  EXPECT_EQ(s.pages_for(*a), 4);
  EXPECT_EQ(s.pages_for(*b), 4);
  auto big = seq(4, 60, 40);  // 7 pages
  for (SeqState* x : {a.get(), b.get(), big.get(), c.get()}) s.add(x);
  StepPlan p = s.plan(kNoDraft);
  ASSERT_EQ(p.admitted.size(), 2u);  // a, b: 8 pages; big needs 7 of the 2 left and waits
  EXPECT_EQ(p.admitted[0], a.get());
  EXPECT_EQ(p.admitted[1], b.get());
  EXPECT_EQ(s.n_running(), 2);
  EXPECT_EQ(s.n_waiting(), 2);  // c fits, but waits behind big (FIFO: no starving the head)
  EXPECT_EQ(pages.n_used(), 8);
  EXPECT_EQ(a->blocks.size(), 4u);
  // a ends: its pages go back at once, yet big (7) still does not fit in the 6 free.
  s.finish(a.get());
  EXPECT_TRUE(a->blocks.empty());
  EXPECT_EQ(pages.n_used(), 4);
  p = s.plan(kNoDraft);
  ASSERT_EQ(p.admitted.size(), 0u);
  s.finish(b.get());  // now big and c (7 + 1 pages)
  p = s.plan(kNoDraft);
  ASSERT_EQ(p.admitted.size(), 2u);
  EXPECT_EQ(p.admitted[0], big.get());
  EXPECT_EQ(p.admitted[1], c.get());
  EXPECT_EQ(pages.n_used(), 8);
}

TEST(Scheduler, NoMoreThanMaxNumSeqsRun) {
  BlockAllocator pages(100);
  Scheduler s(options(2, 256), pages);
  std::vector<std::unique_ptr<SeqState>> q;
  for (uint64_t i = 1; i <= 5; ++i) {
    q.push_back(seq(i, 8, 8));
    s.add(q.back().get());
  }
  EXPECT_EQ(s.plan(kNoDraft).admitted.size(), 2u);
  EXPECT_EQ(s.plan(kNoDraft).admitted.size(), 0u);
  s.finish(q[1].get());
  const StepPlan p = s.plan(kNoDraft);
  ASSERT_EQ(p.admitted.size(), 1u);
  EXPECT_EQ(p.admitted[0], q[2].get());
}

TEST(Scheduler, PromptChunksShareAStepWithDecodes) {
  BlockAllocator pages(100);
  Scheduler s(options(8, 32), pages);
  auto d = seq(1, 10, 20), long_prompt = seq(2, 100, 10), next = seq(3, 50, 10);
  for (SeqState* x : {d.get(), long_prompt.get(), next.get()}) s.add(x);
  s.plan(kNoDraft);
  decoding(*d, 1);
  StepPlan p = s.plan(kNoDraft);
  ASSERT_EQ(p.rows.size(), 2u);  // the decode first, then as much prompt as the budget leaves
  EXPECT_EQ(p.rows[0].seq, d.get());
  EXPECT_TRUE(p.rows[0].decode);
  EXPECT_EQ(p.rows[0].n, 1);
  EXPECT_EQ(p.rows[1].seq, long_prompt.get());
  EXPECT_FALSE(p.rows[1].decode);
  EXPECT_EQ(p.rows[1].n, 31);
  // Most of the prompt done: its last 9 tokens and 22 of the next prompt.
  long_prompt->n_prefilled = 91;
  p = s.plan(kNoDraft);
  ASSERT_EQ(p.rows.size(), 3u);
  EXPECT_EQ(p.rows[1].n, 9);
  EXPECT_EQ(p.rows[2].seq, next.get());
  EXPECT_EQ(p.rows[2].n, 22);
}

TEST(Scheduler, DecodesFillingTheBudgetCannotStarveAPrompt) {
  BlockAllocator pages(100);
  Scheduler s(options(32, 16), pages);
  std::vector<std::unique_ptr<SeqState>> q;
  for (uint64_t i = 1; i <= 20; ++i) {
    q.push_back(seq(i, 4, 8));
    s.add(q.back().get());
  }
  s.plan(kNoDraft);
  for (int i = 0; i < 19; ++i) decoding(*q[i], 1);  // 19 decodes > 16 rows of budget
  const StepPlan p = s.plan(kNoDraft);
  ASSERT_EQ(p.rows.size(), 20u);
  EXPECT_FALSE(p.rows.back().decode);
  EXPECT_EQ(p.rows.back().n, 4);  // the prompt still moves (at least 16 tokens, here all 4)
}

TEST(Scheduler, VerifyBlocksCountInTheTokenBudget) {
  BlockAllocator pages(100);
  Scheduler s(options(8, 32, 3), pages);
  auto a = seq(1, 10, 40, true), b = seq(2, 10, 40, true), penalized = seq(3, 10, 40, false), p3 = seq(4, 64, 4, true);
  for (SeqState* x : {a.get(), b.get(), penalized.get(), p3.get()}) s.add(x);
  EXPECT_EQ(s.pages_for(*a), 4);  // 10 + 40 + a verify block of 3 + 1
  s.plan(kNoDraft);
  decoding(*a, 1), decoding(*b, 5), decoding(*penalized, 1);
  int64_t asked_for = -1;
  StepPlan p = s.plan([&](int64_t n) {
    asked_for = n;
    return 7;  // more than K: clamped to 3
  });
  EXPECT_EQ(asked_for, 3);  // three sequences decode
  EXPECT_EQ(p.k, 3);
  ASSERT_EQ(p.rows.size(), 4u);
  EXPECT_EQ(p.rows[0].n, 4);
  EXPECT_EQ(p.rows[0].n_draft, 3);
  EXPECT_EQ(p.rows[1].n, 4);
  EXPECT_EQ(p.rows[2].n, 1);  // no drafts for a penalized request
  EXPECT_EQ(p.rows[2].n_draft, 0);
  EXPECT_EQ(p.rows[3].n, 32 - 9);  // the prompt gets what the verify blocks leave
  // Near the model's last position a draft shrinks: the anchor at 253 leaves room for 2.
  a->n_generated = 256 - 10 - 2;
  p = s.plan([](int64_t) -> int64_t { return 3; });
  EXPECT_EQ(p.rows[0].n_draft, 2);
  // Drafting within the budget (one sequence, as the DFlash reference): 3 tokens left, 2 drafts.
  SchedulerOptions within = options(8, 32, 3);
  within.draft_within_budget = true;
  BlockAllocator within_pages(100);
  Scheduler w(within, within_pages);
  auto e = seq(7, 10, 40, true);
  w.add(e.get());
  w.plan(kNoDraft);
  decoding(*e, 37);
  p = w.plan([](int64_t) -> int64_t { return 3; });
  EXPECT_EQ(p.rows[0].n_draft, 2);
  // No proposer anywhere decoding: the draft length is not even asked for.
  auto plain_pages = BlockAllocator(10);
  Scheduler plain(options(8, 32, 3), plain_pages);
  auto c = seq(9, 4, 4, false);
  plain.add(c.get());
  plain.plan(kNoDraft);
  decoding(*c, 1);
  bool asked = false;
  p = plain.plan([&](int64_t) -> int64_t { asked = true; return 3; });
  EXPECT_FALSE(asked);
  EXPECT_EQ(p.k, 0);
}

TEST(Scheduler, CancellingAWaitingOrARunningRequest) {
  BlockAllocator pages(4);
  Scheduler s(options(8, 64), pages);
  auto a = seq(1, 30, 30), b = seq(2, 30, 30), c = seq(3, 30, 30);  // 4 pages each: one runs at a time
  for (SeqState* x : {a.get(), b.get(), c.get()}) s.add(x);
  s.plan(kNoDraft);
  EXPECT_EQ(s.n_running(), 1);
  EXPECT_EQ(s.drop_waiting(2), b.get());  // waiting: just leaves the queue
  EXPECT_EQ(s.drop_waiting(2), nullptr);
  EXPECT_EQ(s.drop_waiting(1), nullptr);  // running: not in the queue
  s.finish(a.get());                      // a running request is cancelled by finishing it
  EXPECT_EQ(pages.n_used(), 0);
  const StepPlan p = s.plan(kNoDraft);
  ASSERT_EQ(p.admitted.size(), 1u);
  EXPECT_EQ(p.admitted[0], c.get());
  EXPECT_EQ(s.n_waiting(), 0);
  EXPECT_THROW(s.finish(b.get()), Error);  // never ran
}

// A model with per-sequence state (a hybrid's recurrent state) holds one
// state slot per running sequence: admission waits for a free slot as it
// waits for pages, and a finishing sequence gives its slot back.
TEST(Scheduler, StateSlotsGateAdmissionAndComeBack) {
  BlockAllocator pages(100), slots(2);
  Scheduler s(options(8, 256), pages, &slots);
  auto a = seq(1, 10, 6), b = seq(2, 10, 6), c = seq(3, 10, 6);
  s.add(a.get()), s.add(b.get()), s.add(c.get());
  StepPlan p = s.plan(kNoDraft);
  ASSERT_EQ(p.admitted.size(), 2u);  // two slots, though pages and max_num_seqs allow three
  EXPECT_EQ(s.n_waiting(), 1);
  EXPECT_NE(a->state_slot, b->state_slot);
  EXPECT_GE(a->state_slot, 0);
  EXPECT_EQ(c->state_slot, -1);
  EXPECT_EQ(slots.n_free(), 0);
  const int32_t freed = a->state_slot;
  s.finish(a.get());
  EXPECT_EQ(a->state_slot, -1);
  EXPECT_EQ(slots.n_free(), 1);
  p = s.plan(kNoDraft);
  ASSERT_EQ(p.admitted.size(), 1u);
  EXPECT_EQ(c->state_slot, freed);
  s.finish(b.get()), s.finish(c.get());
  EXPECT_EQ(slots.n_free(), 2);
  EXPECT_EQ(pages.n_free(), 100);
}

}  // namespace
}  // namespace blockspec

namespace blockspec {
namespace {

// vLLM's draft max_model_len: draft tokens stay below it; a longer sequence
// decodes one token per step (verify row without drafts).
TEST(Scheduler, DraftMaxModelLenStopsDraftsPastIt) {
  SchedulerOptions o = options(8, 64, 3);
  o.max_draft_pos = 20;
  BlockAllocator pages(100);
  Scheduler s(o, pages);
  auto a = seq(1, 10, 40, true);
  s.add(a.get());
  s.plan(kNoDraft);
  decoding(*a, 5);  // context 15: drafts at 15, 16, 17
  StepPlan p = s.plan([](int64_t) -> int64_t { return 3; });
  EXPECT_EQ(p.rows[0].n_draft, 3);
  decoding(*a, 8);  // context 18: room for positions 18, 19
  p = s.plan([](int64_t) -> int64_t { return 3; });
  EXPECT_EQ(p.rows[0].n_draft, 2);
  decoding(*a, 12);  // context 22: past the drafter's length
  p = s.plan([](int64_t) -> int64_t { return 3; });
  EXPECT_EQ(p.rows[0].n_draft, 0);
  EXPECT_EQ(p.rows[0].n, 1);
}

}  // namespace
}  // namespace blockspec

namespace blockspec {
namespace {

// Prefix caching with a predicate on cached pages (the engine's: the
// drafter's context of the page is kept too): the hits stop at the first
// page it refuses, and only the pages before it are taken.
TEST(Scheduler, CachedPagesStopAtTheFirstTheEngineCannotUse) {
  BlockAllocator blocks(32);
  std::vector<int32_t> prompt(80);  // 5 full pages
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i * 7 % 50);
  // Publish the prompt's first 4 pages as a finished request would.
  const std::vector<int32_t> held = blocks.allocate(4);
  std::vector<uint64_t> hashes;
  uint64_t parent = 0;
  for (int i = 0; i < 4; ++i) {
    const uint64_t h = page_hash(parent, prompt.data() + i * 16, 16);
    blocks.publish(held[i], h, parent, prompt.data() + i * 16, 16);
    hashes.push_back(h);
    parent = h;
  }
  blocks.free(held);
  for (const int usable : {4, 2, 0}) {
    SCOPED_TRACE("usable pages " + std::to_string(usable));
    SchedulerOptions o = options(4, 64);
    o.prefix_caching = true;
    std::vector<std::pair<int32_t, uint64_t>> asked;
    o.cached_page_usable = [&](int32_t b, uint64_t h) {
      asked.emplace_back(b, h);
      return static_cast<int>(asked.size()) <= usable;
    };
    Scheduler sched(o, blocks);
    auto s = seq(1, 80, 8);
    s->prompt_tokens = prompt.data();
    sched.add(s.get());
    sched.plan(kNoDraft);
    ASSERT_EQ(sched.n_running(), 1);
    // Asked of the pages in order, with their hashes, until one is refused.
    ASSERT_EQ(asked.size(), static_cast<size_t>(std::min(usable + 1, 4)));
    for (size_t i = 0; i < asked.size(); ++i) {
      EXPECT_EQ(asked[i].first, held[i]);
      EXPECT_EQ(asked[i].second, hashes[i]);
    }
    EXPECT_EQ(s->n_cached, usable * 16);
    EXPECT_EQ(s->n_prefilled, usable * 16);
    EXPECT_EQ(s->cached_hash, usable > 0 ? hashes[usable - 1] : 0u);
    for (int i = 0; i < usable; ++i) EXPECT_EQ(s->blocks[i], held[i]);
    EXPECT_EQ(sched.cache_hits(), static_cast<uint64_t>(usable * 16));
    sched.finish(s.get());
  }
}

}  // namespace
}  // namespace blockspec
