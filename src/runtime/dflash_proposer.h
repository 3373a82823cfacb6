// DFlash / DFlash2 drafter as a Proposer: keeps the drafter's context cache
// in step with the committed tokens and drafts one block per step.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/dflash.h"
#include "runtime/ngram.h"
#include "runtime/spec_types.h"

namespace blockspec {

class DFlashProposer : public Proposer {
 public:
  // greedy_draft false -- draft_sample_method "probabilistic" (at T > 0 draft tokens are sampled
  // from q and verified against it: DFlash1 q = sampling_probs of the draft
  // logits with the request's temperature/top-k/top-p, DFlash2 q = the
  // selector's softmax over its candidates); true -- "greedy" (argmax / greedy
  // walk; verified as a one-hot q). capacity: longest sequence.
  // The drafter's weights may be shared by many sequences' proposers (the
  // server); each proposer holds its own context cache.
  // kv_dtype: the dtype of its context K/V (SpecConfig::draft_kv_dtype).
  // whole_context: sliding layers keep every position (DraftCache rings off).
  // lookup: n-gram prompt lookup that drafts first (SpecConfig::lookup_first):
  // when it finds a match the drafter does not run for this sequence this step.
  DFlashProposer(std::shared_ptr<DraftModel> model, int64_t capacity, bool greedy_draft,
                 KvDType kv_dtype = KvDType::kF32, bool whole_context = false,
                 std::optional<NgramProposer> lookup = std::nullopt);
  std::string method() const override { return draft_method_name(model_->config().method); }
  std::vector<int64_t> tap_layers() const override { return model_->config().target_layer_ids; }
  bool lookup_first() const override { return lookup_.has_value(); }
  void observe(const std::vector<int32_t>& seq, int64_t n_seen, int64_t n_new, const float* taps) override;
  void propose(const std::vector<int32_t>& seq, int64_t k, const SamplingParams& sp, Rng& rng, Draft& out) override;
  void reset() override;
  int64_t context_bytes_per_token() const override { return cache_.bytes_per_token(); }
  int64_t context_size() const override { return cache_.size(); }
  void commit_context() override;
  bool save_context(int64_t lo, int64_t n, uint8_t* dst) const override { return cache_.save(lo, n, dst); }
  void load_context(int64_t n, const uint8_t* src) override;
  // Proposers of one drafter draft together: one drafter forward and one
  // lm_head GEMM for all their sequences (bit-identical to drafting alone).
  const void* batch_key() const override { return model_.get(); }
  void propose_together(const std::vector<ProposeCall>& calls) override;
  const DraftModel& model() const { return *model_; }
  DraftModel& model() { return *model_; }

 private:
  // The draft of one call from its k draft-logit rows [k, Vt] (and hidden_).
  void pick_draft(const ProposeCall& call, int64_t k, const float* logits, int64_t Vt);
  std::shared_ptr<DraftModel> model_;
  DraftCache cache_;
  bool greedy_only_;
  std::optional<NgramProposer> lookup_;
  std::vector<float> pending_;  // [n_pending, T*H] taps of committed tokens not yet in the draft cache
  int64_t n_pending_ = 0;
  std::vector<float> hidden_, logits_, probs_;
  DraftModel::Selection sel_;
};

}  // namespace blockspec
