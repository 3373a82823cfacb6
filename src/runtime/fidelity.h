// Fidelity of a model A against a reference model B over the same tokens:
// perplexity of each, KL(B || A) per position and top-1 agreement. The CLI's
// `eval` feeds it logits rows; the math lives here so tests (and later the
// server's quantization checks) can use it without a command line.
//
// All math is in double on a stable log-softmax (max subtracted first), so
// logits of +-1e4 give finite results, and identical rows give KL exactly 0.
#pragma once
#include <cstdint>
#include <vector>

namespace blockspec {

// out[v] = x[v] - logsumexp(x), computed in double.
//   x: [n] -> out: [n]
void log_softmax(const float* x, int64_t n, std::vector<double>& out);

// KL(P || Q) = sum_v p(v) (log p(v) - log q(v)), from log-probabilities.
//   log_p, log_q: [n]
double kl_divergence(const std::vector<double>& log_p, const std::vector<double>& log_q);

// Nearest-rank percentile: the ceil(pct/100 * N)-th smallest value (1-based),
// the smallest for pct == 0. values need not be sorted; empty -> 0.
double percentile_nearest_rank(std::vector<double> values, double pct);

// What FidelityStats has accumulated, to save and restore a long eval (cli/cmd_eval.cc --state).
struct FidelityState {
  double sum_nll_a = 0, sum_nll_b = 0;
  int64_t n_agree = 0;
  std::vector<double> kl;  // [n_tokens]
};

// Accumulates per-position statistics of model A against reference B.
class FidelityStats {
 public:
  FidelityStats() = default;
  explicit FidelityStats(const FidelityState& s) : sum_nll_a_(s.sum_nll_a), sum_nll_b_(s.sum_nll_b), n_agree_(s.n_agree), kl_(s.kl) {}
  FidelityState state() const { return {sum_nll_a_, sum_nll_b_, n_agree_, kl_}; }
  // One scored position: both models' logits for the same context, and the
  // token that actually follows. Throws Error on non-finite logits or a
  // target outside [0, vocab).
  //   logits_a, logits_b: [vocab]
  void add(const float* logits_a, const float* logits_b, int64_t vocab, int32_t target);

  int64_t n_tokens() const { return static_cast<int64_t>(kl_.size()); }
  double nll_mean() const;            // mean -log pA(target)
  double nll_mean_reference() const;  // mean -log pB(target)
  double ppl() const;                 // exp(nll_mean())
  double ppl_reference() const;       // exp(nll_mean_reference())
  double kld_mean() const;            // mean KL(B || A)
  double kld_p99() const;             // nearest-rank 99th percentile of KL(B || A)
  double kld_max() const;
  double top1_agreement() const;      // fraction with argmax A == argmax B
  const std::vector<double>& kld_values() const { return kl_; }

 private:
  double sum_nll_a_ = 0, sum_nll_b_ = 0;
  int64_t n_agree_ = 0;
  std::vector<double> kl_;            // [n_tokens]
  std::vector<double> log_pa_, log_pb_;  // [vocab] scratch
};

}  // namespace blockspec
