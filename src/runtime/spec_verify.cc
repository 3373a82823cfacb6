#include "runtime/spec_verify.h"

#include <cmath>
#include <vector>

#include "base/error.h"

namespace blockspec {

namespace {

void check_draft(const Draft& d, const float* logits, int64_t V) {
  if (V <= 0 || logits == nullptr) fail("verify: need logits of a vocabulary >= 1, found vocab ", V);
  const int64_t k = d.size();
  for (int64_t i = 0; i < k; ++i)
    if (d.tokens[i] < 0 || d.tokens[i] >= V) fail("verify: draft token ", i, " is ", d.tokens[i], ", vocab ", V);
  const auto n_q = static_cast<int64_t>(d.q.size());
  if (d.q_kind == Draft::Q::kOneHot && (n_q != 0 || !d.cand.empty()))
    fail("verify: a one-hot draft carries ", n_q, " q values (q_kind not set by the proposer?)");
  if (d.q_kind == Draft::Q::kDense && n_q != k * V)
    fail("verify: dense q must be [k, V] = ", k * V, " floats, found ", n_q);
  if (d.q_kind == Draft::Q::kCandidates) {
    const int64_t C = d.n_cand;
    if (k > 0 && C <= 0) fail("verify: candidate q needs n_cand >= 1, found ", C);
    if (n_q != k * C || static_cast<int64_t>(d.cand.size()) != k * C)
      fail("verify: candidate q and cand must be [k, C] = ", k * C, ", found ", n_q, " and ", d.cand.size());
    for (int32_t c : d.cand)
      if (c < 0 || c >= V) fail("verify: candidate id ", c, " outside vocab ", V);
  }
}

// q_i(x): the probability the proposal gave draft token x at slot i.
double q_of(const Draft& d, int64_t i, int32_t x, int64_t V) {
  switch (d.q_kind) {
    case Draft::Q::kOneHot: return 1.0;
    case Draft::Q::kDense: return d.q[i * V + x];
    case Draft::Q::kCandidates: {
      const int64_t C = d.n_cand;
      double s = 0;
      for (int64_t c = 0; c < C; ++c)
        if (d.cand[i * C + c] == x) s += d.q[i * C + c];
      return s;
    }
  }
  return 0.0;
}

// r = normalize(max(p - q_i, 0)) with q_i the full proposal row of slot i;
// r = p when that has no mass.
//   p: [V] -> r: [V]
void residual(const Draft& d, int64_t i, const std::vector<float>& p, int64_t V, std::vector<float>& r) {
  r = p;
  switch (d.q_kind) {
    case Draft::Q::kOneHot: r[d.tokens[i]] = 0.0f; break;
    case Draft::Q::kDense:
      for (int64_t j = 0; j < V; ++j) r[j] -= d.q[i * V + j];
      break;
    case Draft::Q::kCandidates:
      for (int64_t c = 0; c < d.n_cand; ++c) r[d.cand[i * d.n_cand + c]] -= d.q[i * d.n_cand + c];
      break;
  }
  double mass = 0;
  for (float& v : r) mass += v = v > 0 ? v : 0.0f;
  if (!(mass > 0)) {
    r = p;
    return;
  }
  const double inv = 1.0 / mass;
  for (float& v : r) v = static_cast<float>(v * inv);
}

}  // namespace

VerifyOutcome verify_greedy(const Draft& d, const float* logits, int64_t V) {
  check_draft(d, logits, V);
  VerifyOutcome out;
  while (out.accepted < d.size() && d.tokens[out.accepted] == argmax(logits + out.accepted * V, V)) ++out.accepted;
  out.next = argmax(logits + out.accepted * V, V);
  return out;
}

// T <= 0 is greedy (no rng draws). A draft token whose q(x) is not a positive
// finite number cannot come from the proposal it claims (a proposer bug): it
// is rejected and the token is drawn from p itself, not from the residual, so
// the emitted token is still distributed exactly as p whatever the draft was.
VerifyOutcome verify_sampled(const Draft& d, const float* logits, int64_t V, const SamplingParams& sp, Rng& rng) {
  if (sp.temperature <= 0) return verify_greedy(d, logits, V);
  check_draft(d, logits, V);
  VerifyOutcome out;
  std::vector<float> p, r;  // [V] each
  for (int64_t i = 0; i < d.size(); ++i) {
    sampling_probs(logits + i * V, V, sp, p);
    const int32_t x = d.tokens[i];
    const double qx = q_of(d, i, x, V);
    if (!(qx > 0 && std::isfinite(qx))) {
      out.next = sample_from_probs(p.data(), V, rng);
      return out;
    }
    if (rng.uniform() * qx < p[x]) {  // accept with probability min(1, p(x) / q(x))
      ++out.accepted;
      continue;
    }
    residual(d, i, p, V, r);
    out.next = sample_from_probs(r.data(), V, rng);
    return out;
  }
  sampling_probs(logits + d.size() * V, V, sp, p);  // bonus from row k
  out.next = sample_from_probs(p.data(), V, rng);
  return out;
}

}  // namespace blockspec
