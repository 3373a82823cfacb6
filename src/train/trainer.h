// The drafter training loop of `blockspec train-drafter` (issue 15,
// training.md §1-§4): records packed into rows of up to seq_len tokens,
// anchors re-drawn every step, labels = the target's greedy tokens (the
// data, training.md §8), fixed exp decay or D-PACE position weights, AdamW with
// clipping and warm-up + cosine schedule, held-out eal, checkpoints every
// few minutes that a rerun resumes from.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "train/draft_checkpoint.h"
#include "train/draft_data.h"

namespace blockspec {

struct TrainOptions {
  int64_t epochs = 6, seq_len = 2048, max_anchors = 256;
  double lr = 6e-4, beta1 = 0.9, beta2 = 0.95, weight_decay = 0.0, eps = 1e-8;
  double warmup_frac = 0.04, floor_ratio = 0.1, clip = 1.0, gamma = 4.0;
  double dpace_alpha = 0;         // > 0: D-PACE position weights with this alpha (training.md §3) instead of gamma's decay
  bool cosine = true;
  uint64_t seed = 42;
  double val_frac = 0.1;          // records held out (every 10th) for the eal the progress line reports
  int64_t eval_every = 50;        // steps between held-out evaluations
  double checkpoint_every_s = 600;
  int64_t max_steps = 0;          // > 0: stop after this many steps (a budgeted run); the schedule still spans all epochs
};

struct TrainProgress {
  int64_t step = 0, total_steps = 0, epoch = 0;
  double loss = 0, train_eal = 0, val_eal = -1, lr = 0, grad_norm = 0;
  std::vector<double> slot_acc;   // [B] accuracy per block slot (slot 0 unused), last eval_every steps
  std::vector<double> val_slot_acc;
  double tokens_per_s = 0, eta_s = 0, elapsed_s = 0;
  bool eval = false;              // this report carries a fresh val_eal
};

struct TrainResult {
  double val_eal_start = 0, val_eal_end = 0;
  std::vector<double> val_slot_acc_end;
  int64_t steps = 0;
  double seconds = 0, tokens_per_s = 0;
};

// Trains p (already initialised, or restored from out_dir/train_state.safetensors
// when resume is set and it exists) on data; writes out_dir/train_state.safetensors
// and the drafter checkpoint to out_dir at every checkpoint and at the end.
TrainResult train_drafter(const DraftData& data, const FrozenTarget& target, const DraftShape& s, DraftParams& p,
                          const DraftArch& arch, const TrainOptions& o, const std::string& out_dir, bool resume,
                          const OpContext& ctx, const std::function<void(const TrainProgress&)>& progress);

// eal and per-slot accuracy of p on records (fixed anchors from seed),
// forward only: training.md §3's metric, the estimate of greedy tau.
struct EvalResult {
  double eal = 0, loss = 0;
  std::vector<double> slot_acc;  // [B]
};
EvalResult evaluate_drafter(const DraftData& data, const std::vector<int64_t>& records, const FrozenTarget& target,
                            const DraftShape& s, const DraftParams& p, const DraftArch& arch, const TrainOptions& o,
                            const OpContext& ctx);

// A reduced draft vocabulary (training.md §5): the n target ids most
// frequent among the data's response tokens (ties: lower id first), padded
// with the lowest unused ids, ascending. n must be in [1, V]; a response id
// outside [0, V) fails, naming `source` (the data's file).
std::vector<int32_t> choose_draft_vocab(const DraftData& data, int64_t n, int64_t V, const std::string& source);

}  // namespace blockspec
