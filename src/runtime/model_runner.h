// The ModelRunner: turns the scheduler's plan for one step into work on the
// model. For every decoding row it asks the proposer for the planned draft,
// then runs ONE target forward over all rows (verify blocks and prompt
// chunks of every sequence), then samples or verifies each sequence's rows
// (greedy: the longest matching prefix; T > 0: rejection sampling,
// runtime/spec_verify.h), accepts, crops the KV cache to the committed
// tokens and emits them. This is the only copy of the speculative step: the
// serving engine runs it over many sequences, generate_speculative over one.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/transformer.h"
#include "runtime/scheduler.h"
#include "runtime/sequence.h"

namespace blockspec {

class ModelRunner {
 public:
  explicit ModelRunner(Transformer& model) : model_(model) {}

  struct StepOutcome {
    std::vector<Sequence*> touched;  // sequences of the plan, once each, in row order
    int64_t new_tokens = 0, prompt_tokens = 0;
    int64_t n_drafted = 0;           // sequences that drafted (with a drafter: that ran it)
    int64_t n_lookup = 0;            // sequences n-gram lookup drafted for in front of a drafter
    SpecStats drafted, looked_up;    // this step's verified drafts: the proposer's (drafter's), n-gram lookup's
    double draft_seconds = 0;        // time spent in proposers' drafts
    double context_seconds = 0;      // time in drafters' context catch-ups apart from the drafts
    double forward_seconds = 0;      // the target's forward over every row
    int64_t decode_rows = 0;         // its rows when all were decoding sequences' (tokens and drafts), else 0
  };
  // Runs the plan's rows; seq_of maps a SeqState to its Sequence. After it,
  // each touched sequence's `out` holds the tokens it emitted this step and
  // `end_reason` is set when it ended ("stop": eos / stop token, "length").
  // lengths: with n-gram lookup in front of a drafter, each source's draft length (capped by the row's).
  StepOutcome run(const StepPlan& plan, const std::function<Sequence&(const SeqState&)>& seq_of,
                  const DraftLengths* lengths = nullptr);

 private:
  const float* processed(Sequence& s, const float* logits_row);  // with s's penalties and grammar mask applied
  const float* masked_block(Sequence& s, const float* rows, int64_t kd);
  int32_t pick(Sequence& s, const float* processed_row);  // samples from a row processed() gave
  // Appends t (chosen from processed_row, whose log-softmax gives its logprob) to s; false when s ended.
  bool emit(Sequence& s, int32_t t, const float* processed_row);
  Transformer& model_;
  std::vector<float> logits_;  // [rows, V]
};

}  // namespace blockspec
