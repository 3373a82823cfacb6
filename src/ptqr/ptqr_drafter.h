// `blockspec ptqr DRAFTER OUT --target TARGET --drafter-data FILE`: PTQR of a
// DFlash drafter (issue 18 part 4, training.md §10). The student is the
// drafter as a W8A8 G128 checkpoint serves it -- every quantized linear (fc,
// q/k/v, o, gate/up, down) on its int8 codes with the input rounded per
// token to int8 (DraftShape::act_int8) -- trained by distillation against
// the drafter's own bf16 forward: loss = the slot-weighted KL(teacher ||
// student) of the draft logits over the blocks of train-drafter's rows
// (features = the target's taps in a `train-drafter --data-only` file),
// straight-through gradients into latent f32 masters, each rounding decision
// dithered with U(-1/2, 1/2) sigma_t annealed to exactly 0 (ptqr.h's
// schedule). Norms, the frozen head and everything else stay as they are.
// The sigma = 0 codes are written through `quantize`'s writer (W8A8,
// compressed-tensors), so OUT loads like `quantize --scheme w8a8` of the
// drafter and serves exactly the student's codes.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/thread_pool.h"
#include "quantize/quantizer.h"
#include "train/draft_step.h"

namespace blockspec {

struct PtqrDrafterOptions {
  std::string drafter, out, target, data;  // data: draft_data.bin of `train-drafter --data-only`
  int64_t steps = 200;                     // optimizer steps, one packed row each
  int64_t seq_len = 2048, max_anchors = 64;
  double gamma = 4.0;                      // slot weights exp(-(k-1)/gamma), as train-drafter
  double lr = 1e-5, warmup_frac = 0.05, lr_floor = 0.1, clip = 1.0;
  double dither_start = 1.0, dither_decay = 0;  // ptqr.h dither_sigma
  double val_frac = 0.1;                   // records held out (every 10th) for the KL / eal report
  int64_t max_val_records = 32, eval_every = 25;
  uint64_t seed = 0;
  bool resume = false;
  int64_t stop_after_steps = -1;  // stop (state kept, nothing exported) once this many steps are done
  int n_threads = 0;
  bool progress = true;
};

struct PtqrDrafterEval {
  double kl = 0, eal = 0;           // held-out KL(teacher || this) per slot and eal against the data labels
  std::vector<double> slot_acc;     // [B]
};

struct PtqrDrafterReport {
  PtqrDrafterEval teacher, rtn, trained;  // the bf16 drafter itself, W8A8 RTN, W8A8 after PTQR (sigma = 0)
  std::vector<std::pair<std::string, double>> rel_err;  // per module: ||w - deq|| / ||w|| of the trained master
  int64_t steps = 0, resumed_from = 0, n_val_records = 0, n_train_records = 0;
  double seconds = 0, tokens_per_s = 0, peak_rss_mb = 0;
  int64_t n_copied = 0;  // export audit: tensors copied from DRAFTER byte for byte
  uint64_t out_bytes = 0;
  bool stopped = false;  // stop_after_steps: the state is kept, nothing exported, `trained` not evaluated
};

PtqrDrafterReport run_ptqr_drafter(const PtqrDrafterOptions& o);

// The student at sigma = 0 without training: `teacher` with fc and every *_proj replaced by its W8A8 RTN codes
// (on `spec`'s grid, what `quantize --scheme w8a8` writes) dequantized. Run it with DraftShape::act_int8.
DraftParams w8a8_rtn_student(const DraftParams& teacher, const DraftShape& s, const QuantSpec& spec, ThreadPool& pool);

}  // namespace blockspec
