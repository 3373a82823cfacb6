#include "runtime/dflash_proposer.h"

#include "base/error.h"

namespace blockspec {

DFlashProposer::DFlashProposer(std::shared_ptr<DraftModel> model, int64_t capacity, bool greedy_draft,
                               KvDType kv_dtype, bool whole_context, std::optional<NgramProposer> lookup)
    : model_(std::move(model)),
      cache_(model_->new_cache(capacity, kv_dtype, !whole_context)),
      greedy_only_(greedy_draft),
      lookup_(std::move(lookup)) {}

void DFlashProposer::reset() {
  cache_.reset();
  pending_.clear();
  n_pending_ = 0;
}

void DFlashProposer::load_context(int64_t n, const uint8_t* src) {
  if (n_pending_ != 0) fail("dflash: a context loaded after observed tokens");
  cache_.load(n, src);
}

void DFlashProposer::commit_context() {
  if (n_pending_ == 0) return;
  model_->forward_batch({DraftModel::DraftJob{&cache_, pending_.data(), n_pending_, 0, -1, &hidden_}});
  pending_.clear();
  n_pending_ = 0;
}

void DFlashProposer::observe(const std::vector<int32_t>&, int64_t n_seen, int64_t n_new, const float* taps) {
  if (taps == nullptr) fail("dflash: the target ran without taps");
  if (n_seen != cache_.size() + n_pending_)
    fail("dflash: committed tokens out of step (", n_seen, " seen, drafter has ", cache_.size() + n_pending_, ")");
  const int64_t w = model_->config().n_taps() * model_->config().base.hidden_size;
  pending_.insert(pending_.end(), taps, taps + n_new * w);
  n_pending_ += n_new;
}

void DFlashProposer::propose(const std::vector<int32_t>& seq, int64_t k, const SamplingParams& sp, Rng& rng,
                             Draft& out) {
  propose_together({ProposeCall{this, &seq, k, &sp, &rng, &out}});
}

void DFlashProposer::propose_together(const std::vector<ProposeCall>& calls) {
  const DraftConfig& c = model_->config();
  const int64_t H = c.base.hidden_size;
  std::vector<DraftModel::DraftJob> jobs;
  std::vector<const ProposeCall*> of;  // the call of each job
  for (const ProposeCall& call : calls) {
    auto* p = dynamic_cast<DFlashProposer*>(call.proposer);
    if (p == nullptr || p->model_ != model_) fail("dflash: proposers of different drafters drafted together");
    call.out->clear();
    // More masks than trained for is out of distribution (dflash.md §3.2).
    if (call.seq->empty()) continue;
    if (static_cast<int64_t>(call.seq->size()) != p->cache_.size() + p->n_pending_ + 1)
      fail("dflash: the sequence is not one token (the anchor) ahead of the committed context");
    if (p->lookup_ && call.lookup_k() > 0) {  // n-gram lookup first: a match drafts instead; the taps wait in pending_
      p->lookup_->propose(*call.seq, call.lookup_k(), *call.sp, *call.rng, *call.out);
      call.out->from_lookup = !call.out->tokens.empty();
      if (call.out->from_lookup) continue;
    }
    const int64_t k = std::min<int64_t>(call.k, c.block_size - 1);
    if (k <= 0) continue;
    jobs.push_back({&p->cache_, p->pending_.data(), p->n_pending_, call.seq->back(), k, &p->hidden_});
    of.push_back(&call);
  }
  if (jobs.empty()) return;
  model_->forward_batch(jobs);  // one drafter pass for every sequence
  // Slots 1..k of every job through the target's lm_head in one GEMM.
  int64_t rows = 0;
  for (const auto& jb : jobs) rows += jb.k;
  if (jobs.size() == 1) {
    model_->logits(jobs[0].hidden->data() + H, rows, logits_);
  } else {
    std::vector<float> slots(rows * H);
    int64_t r = 0;
    for (const auto& jb : jobs) {
      std::copy(jb.hidden->begin() + H, jb.hidden->end(), slots.begin() + r * H);
      r += jb.k;
    }
    model_->logits(slots.data(), rows, logits_);
  }
  const int64_t Vt = static_cast<int64_t>(logits_.size()) / rows;
  int64_t r = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto* p = static_cast<DFlashProposer*>(of[i]->proposer);
    p->pending_.clear();
    p->n_pending_ = 0;
    p->pick_draft(*of[i], jobs[i].k, logits_.data() + r * Vt, Vt);
    r += jobs[i].k;
  }
}

void DFlashProposer::pick_draft(const ProposeCall& call, int64_t k, const float* logits, int64_t Vt) {
  const DraftConfig& c = model_->config();
  const int64_t H = c.base.hidden_size;
  const SamplingParams& sp = *call.sp;
  Draft& out = *call.out;
  const bool sample = sp.temperature > 0 && !greedy_only_;
  if (c.method == DraftMethod::kDFlash2) {
    std::vector<double> u(k);
    if (sample)
      for (double& x : u) x = call.rng->uniform();
    model_->select(hidden_.data() + H, logits, k, call.seq->back(), sample ? sp.temperature : 0.f, u, sel_);
    out.tokens = sel_.tokens;
    if (sample) {
      out.q_kind = Draft::Q::kCandidates;
      out.q = sel_.q;
      out.cand = sel_.cand;
      out.n_cand = c.selector_top_k;
    }
    return;
  }
  out.tokens.resize(k);
  if (!sample) {
    for (int64_t i = 0; i < k; ++i) out.tokens[i] = argmax(logits + i * Vt, Vt);
    return;
  }
  // Sampled DFlash1: q = the request's temperature / top-k / top-p applied to
  // the draft logits (ZL-new dflash_generate).
  out.q_kind = Draft::Q::kDense;
  out.q.resize(k * Vt);
  for (int64_t i = 0; i < k; ++i) {
    sampling_probs(logits + i * Vt, Vt, sp, probs_);
    std::copy(probs_.begin(), probs_.end(), out.q.begin() + i * Vt);
    out.tokens[i] = sample_from_probs(probs_.data(), Vt, *call.rng);
  }
}

}  // namespace blockspec
