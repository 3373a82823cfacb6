#include "runtime/model_runner.h"

#include <cmath>

#include <algorithm>

#include "base/error.h"
#include "base/timer.h"
#include "runtime/spec_verify.h"

namespace blockspec {

// Sets the logits of the tokens `mask` forbids to -inf.
void apply_mask(float* row, int64_t V, const std::vector<uint64_t>& mask) {
  for (int64_t t = 0; t < V; ++t)
    if (!token_allowed(mask, static_cast<int32_t>(t))) row[t] = -INFINITY;
}

const float* ModelRunner::processed(Sequence& s, const float* row) {
  if (!s.penalized() && !s.params.grammar) return row;
  const int64_t V = model_.config().vocab_size;
  s.adjusted.assign(row, row + V);
  // OpenAI: logit -= presence * [count > 0] + frequency * count
  for (const auto& [t, c] : s.counts) s.adjusted[t] -= s.params.presence_penalty + s.params.frequency_penalty * c;
  if (s.params.grammar) apply_mask(s.adjusted.data(), V, s.params.grammar->allowed(s.grammar_state));
  return s.adjusted.data();
}

// A verify block's rows under s's grammar: row j masked in the state after
// drafts d1..dj. A draft the grammar forbids gets probability 0 in its row,
// so verification rejects it; rows after it are never read.
//   rows: [kd + 1, V] -> s.masked
const float* ModelRunner::masked_block(Sequence& s, const float* rows, int64_t kd) {
  const int64_t V = model_.config().vocab_size;
  s.masked.assign(rows, rows + (kd + 1) * V);
  int32_t st = s.grammar_state;
  for (int64_t j = 0; j <= kd; ++j) {
    const std::vector<uint64_t>& mask = s.params.grammar->allowed(st);
    apply_mask(s.masked.data() + j * V, V, mask);
    if (j == kd || !token_allowed(mask, s.draft.tokens[j])) break;  // rows past a forbidden draft are never read
    st = s.params.grammar->next(st, s.draft.tokens[j]);
  }
  return s.masked.data();
}

int32_t ModelRunner::pick(Sequence& s, const float* row) {
  return sample_token(row, model_.config().vocab_size, s.params.sampling, s.rng, s.probs);
}

bool ModelRunner::emit(Sequence& s, int32_t t, const float* row) {
  if (s.params.n_logprobs >= 0)  // the distribution t was drawn from
    s.out_logprobs.push_back(
        token_logprob(row, model_.config().vocab_size, s.params.sampling.temperature, t, s.params.n_logprobs));
  // t was drawn from the masked distribution; -1 only when the grammar's
  // automaton outgrew its bounds, and then only stop tokens are allowed.
  if (s.params.grammar) s.grammar_state = s.params.grammar->next(s.grammar_state, t);
  s.tokens.push_back(t);
  s.out.push_back(t);
  ++s.st.n_generated;
  s.counts[t]++;
  if (s.st.n_generated == 1) s.t_first = now_s();
  const auto& eos = model_.config().eos_token_ids;
  const auto& stops = s.params.stop_token_ids;
  if ((!s.params.ignore_eos && std::find(eos.begin(), eos.end(), t) != eos.end()) ||
      std::find(stops.begin(), stops.end(), t) != stops.end()) {
    s.end_reason = "stop";
    return false;
  }
  if (s.st.n_generated >= s.params.max_tokens) {
    s.end_reason = "length";
    return false;
  }
  return true;
}

ModelRunner::StepOutcome ModelRunner::run(const StepPlan& plan, const std::function<Sequence&(const SeqState&)>& seq_of,
                                          const DraftLengths* lengths) {
  StepOutcome o;
  const int64_t V = model_.config().vocab_size;
  // ---- drafts, and one forward over every row of the plan ----
  // Drafts first, all at once: proposers that share a drafter run it once
  // for all their sequences (propose_all).
  std::vector<ProposeCall> calls;
  for (const StepPlan::Row& r : plan.rows) {
    Sequence& s = seq_of(*r.seq);
    o.touched.push_back(&s);
    s.draft.clear();
    if (r.decode && r.n_draft > 0 && s.proposer) {
      calls.push_back({s.proposer, &s.tokens, r.n_draft, &s.params.sampling, &s.rng, &s.draft});
      if (lengths) {
        calls.back().k = std::min(r.n_draft, lengths->drafter);
        calls.back().k_lookup = std::min(r.n_draft, lengths->lookup);
      }
    }
  }
  // A drafter that has not drafted for a while has the taps of many committed tokens waiting (DFlash: its
  // context K/V, run at its next draft). Past kCatchUp of them they run apart and are timed as context, so the
  // cost per draft that decides the draft length (DraftCost) is a draft's, not that of the idle stretch before
  // it: a draft after a few hundred steps at k = 0 read 20 ms where one costs 2 (session 33, humaneval), and
  // kept drafting off.
  constexpr int64_t kCatchUp = 16;
  for (const ProposeCall& c : calls)
    if (c.proposer->context_bytes_per_token() > 0 &&
        static_cast<int64_t>(c.seq->size()) - 1 - c.proposer->context_size() > kCatchUp) {
      const Timer t;
      c.proposer->commit_context();
      o.context_seconds += t.seconds();
    }
  const Timer draft_timer;
  propose_all(calls);
  for (const ProposeCall& c : calls) {
    const int64_t asked = c.out->from_lookup ? c.lookup_k() : c.k;
    if (c.out->size() > asked) fail(c.proposer->method(), ": proposed ", c.out->size(), " tokens, asked for ", asked);
    if (c.out->from_lookup) ++o.n_lookup;
    else ++o.n_drafted;  // a lookup draft costs next to nothing: not the drafter's cost
  }
  o.draft_seconds = draft_timer.seconds();
  std::vector<Transformer::SeqChunk> chunks;
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    const StepPlan::Row& r = plan.rows[i];
    Sequence& s = *o.touched[i];
    std::vector<float>* taps = s.wants_taps ? &s.taps : nullptr;
    if (!r.decode) {
      chunks.push_back({s.params.prompt.data() + s.st.n_prefilled, r.n, s.cache.get(), false, taps});
      continue;
    }
    s.block.assign(1, s.tokens.back());
    s.block.insert(s.block.end(), s.draft.tokens.begin(), s.draft.tokens.end());
    chunks.push_back({s.block.data(), static_cast<int64_t>(s.block.size()), s.cache.get(), true, taps, s.block.size() > 1});
  }
  Timer forward_timer;
  model_.forward_batch(chunks, logits_);
  o.forward_seconds = forward_timer.seconds();
  const bool decode_only =
      std::all_of(plan.rows.begin(), plan.rows.end(), [](const StepPlan::Row& r) { return r.decode; });
  for (const Transformer::SeqChunk& c : chunks) o.decode_rows += decode_only ? c.n : 0;

  // ---- sample / verify, accept, crop, emit ----
  int64_t row = 0;
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    Sequence& s = *o.touched[i];
    const Transformer::SeqChunk& ch = chunks[i];
    const float* taps = s.wants_taps ? s.taps.data() : nullptr;
    s.out.clear();
    s.out_logprobs.clear();
    if (!plan.rows[i].decode) {
      const int64_t n_seen = s.st.n_prefilled;
      s.st.n_prefilled += ch.n;
      o.prompt_tokens += ch.n;
      if (s.proposer) s.proposer->observe(s.tokens, n_seen, ch.n, taps);
      if (!s.st.prefilling()) {
        const float* p = processed(s, logits_.data() + row * V);
        emit(s, pick(s, p), p);
      }
      row += 1;
    } else {
      const int64_t kd = s.draft.size();
      const int64_t start = s.cache->size() - kd - 1;
      const int64_t remaining = s.params.max_tokens - s.st.n_generated;
      // Token j of the block is decided by row j (the anchor's row predicts d1);
      // the rows as sampled: with penalties (a penalized request never
      // drafts, so kd = 0 then) and the grammar's masks.
      const float* rows = logits_.data() + row * V;  // [kd + 1, V]
      BS_ASSERT(kd == 0 || !s.penalized());
      if (kd == 0) rows = processed(s, rows);
      else if (s.params.grammar) rows = masked_block(s, rows, kd);
      VerifyOutcome v;
      if (kd == 0) {
        v.next = pick(s, rows);
      } else {
        v = s.params.sampling.temperature <= 0 ? verify_greedy(s.draft, rows, V)
                                               : verify_sampled(s.draft, rows, V, s.params.sampling, s.rng);
        // Drafts accepted past max_tokens are verified but never emitted:
        // they count as accepted only up to what the request could use.
        const int64_t used = std::min(v.accepted, remaining - 1);
        s.stats.record(kd, used, s.draft.from_lookup);
        (s.draft.from_lookup ? o.looked_up : o.drafted).record(kd, used, s.draft.from_lookup);
      }
      row += kd + 1;
      // The anchor and the accepted drafts are now committed and in the KV;
      // rejected rows are dropped by cropping (and a hybrid model's state
      // rolled back to them). v.next (the correction or bonus) is the new
      // anchor: committed, not yet run.
      model_.commit(*s.cache, start + v.accepted + 1);
      const int64_t n_seen = static_cast<int64_t>(s.tokens.size()) - 1;
      bool go = true;
      for (int64_t j = 0; j < v.accepted && go; ++j) go = emit(s, s.draft.tokens[j], rows + j * V);
      if (go) go = emit(s, v.next, rows + v.accepted * V);
      // Observed: the committed tokens in the KV, the new anchor not yet. A
      // request that ends here is observed too, up to its last token in the
      // KV, so that a drafter can save the context of its last page
      // (prefix caching).
      const int64_t n_new = std::min<int64_t>(v.accepted + 1, static_cast<int64_t>(s.tokens.size()) - n_seen);
      if (s.proposer) s.proposer->observe(s.tokens, n_seen, n_new, taps);
    }
    o.new_tokens += static_cast<int64_t>(s.out.size());
  }
  return o;
}

}  // namespace blockspec
