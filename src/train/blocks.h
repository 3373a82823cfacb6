// The training blocks of one packed row of S tokens (training.md §2, §3,
// §7): which anchors train, what each block slot is labelled with and
// whether it counts, the per-slot loss weights, which keys each block
// query sees, and the expected acceptance length metric. Tensor-free.
//
// Row inputs (all [S]): loss_mask (1 on assistant tokens), doc (document id
// of each token, -1 = padding), pred (the target's own prediction for each
// position: argmax of its distribution computed at position - 1; on
// target-greedy data it equals the data token).
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/sampler.h"

namespace blockspec {

// Anchors: positions a with loss_mask[a + 1] == 1 inside a's document (a
// block whose first draft slot trains; slot 0, the anchor, never does),
// max_anchors of them drawn uniformly without replacement (all when fewer),
// sorted ascending. Drawn anew every step with the trainer's Rng.
std::vector<int64_t> select_anchors(const std::vector<uint8_t>& loss_mask, const std::vector<int32_t>& doc,
                                    int64_t max_anchors, Rng& rng);

// Labels and mask of every block slot: [n_anchors * B], slot k of block j at
// position i = anchors[j] + k. label = pred[i]; mask = 1 when k >= 1, i < S,
// loss_mask[i] == 1 and doc[i] == doc[anchor] (a block never takes labels
// from the next document, training.md §7.2), else 0 (label 0).
struct BlockTargets {
  std::vector<int32_t> labels;
  std::vector<float> mask;
};
BlockTargets block_targets(const std::vector<int64_t>& anchors, const std::vector<int32_t>& pred,
                           const std::vector<uint8_t>& loss_mask, const std::vector<int32_t>& doc, int64_t B);

// Fixed decay: w(0) = 0, w(k) = exp(-(k - 1) / gamma) for k >= 1. [B]
std::vector<float> exp_decay_weights(int64_t B, double gamma);

// D-PACE (training.md §3, arXiv 2605.18810), per block from its detached
// slot losses l [n_blocks * B]: q_k = exp(-l_k), q~_k = (1 - alpha) q_k +
// alpha (1 on masked slots), P_m = prod_{k <= m} q~_k over slots 1..m,
// w_j = mask_j * sum_{m >= j} P_m mask_m. Slot 0 gets 0. [n_blocks * B]
std::vector<float> dpace_weights(const std::vector<float>& slot_loss, const std::vector<float>& mask, int64_t B,
                                 double alpha);

// eal: over blocks with any counted slot, the mean of 1 + the leading run
// of correct counted slots (models/metrics.py compute_accepted_length_counts;
// the run stops at the first wrong or uncounted slot). correct, mask:
// [n_blocks * B]. 0 when no block counts.
double expected_acceptance_length(const std::vector<uint8_t>& correct, const std::vector<float>& mask, int64_t B);

// Key spans of every block query for masked_attention (grad_ops.h), keys
// laid out as [S context rows | n_anchors * B block rows]: query (j, k) at
// position p = a_j + k sees context keys [max(doc start, p - W + 1 if W),
// a_j) (strictly before the anchor: its own feature is not known at
// inference) and block keys of block j: all B slots, or slots <= k when
// causal, cut to |k - l| < W when W > 0. [n_anchors * B, 4]
std::vector<int32_t> block_key_spans(const std::vector<int64_t>& anchors, const std::vector<int32_t>& doc, int64_t B,
                                     bool causal, int64_t window);

}  // namespace blockspec
