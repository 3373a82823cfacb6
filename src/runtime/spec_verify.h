// Verification of a draft against the target's logits for [anchor, d1..dk]
// (dflash.md §3.1, §3.3, §5.1c). Greedy: the longest prefix of draft tokens
// equal to the target's argmax, then the target's argmax as the bonus.
// Sampling (T > 0): standard speculative rejection sampling, lossless for
// every q kind of Draft: accept d_i with probability min(1, p(d_i) / q(d_i)),
// on the first rejection emit a token from normalize(max(p - q, 0)) (p when
// that has no mass), and if all k are accepted emit the bonus from p of the
// last row. p = the target's probabilities after temperature / top-k / top-p
// exactly as sampling_probs computes them without speculation.
#pragma once
#include <cstdint>

#include "runtime/sampler.h"
#include "runtime/spec_types.h"

namespace blockspec {

struct VerifyOutcome {
  int64_t accepted = 0;  // draft tokens accepted, 0..k
  int32_t next = 0;      // the token emitted after them (correction or bonus)
};

//   logits: [k+1, V] target logits of rows anchor, d1..dk
VerifyOutcome verify_greedy(const Draft& d, const float* logits, int64_t V);
VerifyOutcome verify_sampled(const Draft& d, const float* logits, int64_t V, const SamplingParams& sp, Rng& rng);

}  // namespace blockspec
