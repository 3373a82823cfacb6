#include "runtime/dflash_proposer.h"

#include "base/error.h"

namespace blockspec {

DFlashProposer::DFlashProposer(std::shared_ptr<DraftModel> model, int64_t capacity, bool greedy_draft)
    : model_(std::move(model)), cache_(model_->new_cache(capacity)), greedy_only_(greedy_draft) {}

void DFlashProposer::reset() {
  cache_.reset();
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
  out.clear();
  const DraftConfig& c = model_->config();
  k = std::min<int64_t>(k, c.block_size - 1);  // more masks than trained is out of distribution (dflash.md §3.2)
  if (k <= 0 || seq.empty()) return;
  if (static_cast<int64_t>(seq.size()) != cache_.size() + n_pending_ + 1)
    fail("dflash: the sequence is not one token (the anchor) ahead of the committed context");
  const int64_t H = c.base.hidden_size;
  model_->forward(cache_, pending_.data(), n_pending_, seq.back(), k, hidden_);
  pending_.clear();
  n_pending_ = 0;
  model_->logits(hidden_.data() + H, k, logits_);  // slots 1..k
  const int64_t Vt = static_cast<int64_t>(logits_.size()) / k;
  const bool sample = sp.temperature > 0 && !greedy_only_;
  if (c.method == DraftMethod::kDFlash2) {
    std::vector<double> u(k);
    if (sample)
      for (double& x : u) x = rng.uniform();
    model_->select(hidden_.data() + H, logits_.data(), k, seq.back(), sample ? sp.temperature : 0.f, u, sel_);
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
    for (int64_t i = 0; i < k; ++i) out.tokens[i] = argmax(logits_.data() + i * Vt, Vt);
    return;
  }
  // Sampled DFlash1: q = the request's temperature / top-k / top-p applied to
  // the draft logits (ZL-new dflash_generate).
  out.q_kind = Draft::Q::kDense;
  out.q.resize(k * Vt);
  for (int64_t i = 0; i < k; ++i) {
    sampling_probs(logits_.data() + i * Vt, Vt, sp, probs_);
    std::copy(probs_.begin(), probs_.end(), out.q.begin() + i * Vt);
    out.tokens[i] = sample_from_probs(probs_.data(), Vt, rng);
  }
}

}  // namespace blockspec
