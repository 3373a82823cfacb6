// `blockspec ptqr`: quantization-aware retraining whose student is the
// serving kernels (issue 18, ../shared/docs/training.md §10). Block-wise
// (BRECQ / AutoRound style, §10.4): for each decoder layer in order, the
// latent f32 weights of its seven linears are trained so that the layer run
// by the EXACT serving kernels (W8A8: int8 codes on the G128 grid, per-token
// int8 activations, the chosen KV cache dtype; model/decoder_layer.h on the
// codes of the current step) on the student's own input -- the output of the
// layers already retrained and quantized -- matches the teacher layer (bf16
// weights, f32 activations and KV) on the teacher's input. Gradients: dL/dy
// of the exact forward pushed through its straight-through twin
// (ptqr/qat_layer.h). Each rounding decision of the weights is dithered with
// U(-1/2, 1/2) * sigma_t, sigma_t = sigma_0 r^t annealed geometrically and set
// to exactly 0 once below 1e-3 (by default for the last 20% of the steps), so
// the end of training runs the serving rounding. The result is written as
// `blockspec quantize` writes W8A8 (compressed-tensors, the same writer) from
// the final sigma = 0 codes, so serving it runs exactly the student.
//
// Held out (--holdout N): the last N calibration windows are never trained on;
// every val_every steps the sigma = 0 codes are scored on them, and the layer
// keeps the masters of the lowest score, the start (RTN of the smoothed model,
// the one-shot checkpoint) included -- the guard against fitting the training
// windows' rounding (BENCHMARKS.md).
//
// Loss per window of T tokens: (1/T) sum_t ||y_s(t) - y_T(t)||^2 / ||y_T(t)||^2
// (per-token relative error of the layer output; the residual stream's outlier
// tokens would otherwise dominate a plain MSE).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <map>

#include "kernels/kv_kernels.h"
#include "quantize/quantizer.h"
#include "quantize/smooth.h"

namespace blockspec {

struct PtqrOptions {
  std::string in, out;
  QScheme scheme = QScheme::kW8A8;    // w8a8 (int8 weights, per-token int8 activations), w8a16 or w4a16 (weight-only)
  int64_t group = 128;                // weight groups of 128 inputs (-1 is not supported by the student)
  KvDType kv = KvDType::kF32;         // the student's KV cache dtype (training through it)
  std::vector<int32_t> calib_ids;     // calibration tokens, cut into windows
  int64_t window = 512;
  int64_t steps = 100;                // optimizer steps per layer (one window each)
  double lr = 1e-5, warmup_frac = 0.05, lr_floor = 0.1;
  double dither_start = 1.0;          // sigma_0
  double dither_decay = 0;            // r per step; 0: (1e-3 / sigma_0)^(1 / (0.8 steps))
  double weight_decay = 0;
  bool train_vectors = false;         // the norms and biases train too (exported as replaced tensors)
  double lr_vectors = 1e-4;           // their peak AdamW rate (same schedule)
  double smooth = 0;                  // SmoothQuant alpha applied to the student's start (quantize/smooth.h); 0: off
  SmoothMappings smooth_mappings = SmoothMappings::kSmoothQuant;  // --smooth-mappings norms | all
  double smooth_attention = 0;        // SmoothAttention alpha, after SmoothQuant (quantize/smooth_attention.h); 0: off
  std::vector<double> smooth_search;  // per layer, the SmoothQuant alpha among these whose RTN start has the lowest
                                      // serving loss on the first (up to 8) training windows; empty: --smooth for all
  bool smooth_search_mappings = false;  // then each mapping's alpha in turn over the same grid (coordinate search)
  int64_t smooth_tokens = -1;         // SmoothQuant / SmoothAttention statistics over the first n tokens (whole
                                      // windows, at least one); -1: every calibration window
  int64_t holdout = 0;                // the last n windows are never trained on: each layer keeps the step (0: its
                                      // start) whose serving loss on them is lowest, checked every val_every steps
  int64_t val_every = 10;
  int64_t max_layers = -1;            // retrain only the first n layers (tests); the rest are RTN
  uint64_t seed = 0;
  bool resume = false;
  int64_t stop_after_layers = -1;     // stop (state kept, no export) once this many layers are done
  int64_t e2e_steps = 0;              // the end-to-end phase after the block-wise one (ptqr_e2e.h); 0: none
  double e2e_lr = 1e-4;               // its peak AdamW rate of the scale multipliers
  int64_t e2e_stop_after = -1;        // stop (state kept, no export) once this many end-to-end steps are done
  bool keep_outputs = false;          // tests: PtqrReport::codes and stream
  int n_threads = 0;
  bool progress = true;
};

struct PtqrLayerReport {
  int64_t layer = 0;
  double loss_rtn = 0, loss_final = 0;  // exact serving loss over every window: RTN start, after training
  double val_rtn = 0, val_final = 0;    // the same over the held-out windows (holdout > 0)
  int64_t kept_step = -1;               // holdout > 0: the step whose masters were kept (0: the start); else -1
  SmoothAlphas smooth_alphas;           // smooth_search: the alphas picked for this layer (else 0)
  std::vector<std::pair<SmoothAlphas, double>> smooth_scores;  // smooth_search: (alphas, RTN serving loss) per candidate
  double seconds = 0;
  std::vector<std::pair<std::string, double>> rel_err;  // per module: ||W - deq|| / ||W|| of the trained master
};

struct PtqrReport {
  std::vector<PtqrLayerReport> layers;
  int64_t n_windows = 0, window_tokens = 0, resumed_from = 0;
  double total_seconds = 0, train_tokens_per_s = 0, peak_rss_mb = 0;
  std::vector<std::string> notes;
  // The export's audit: tensors copied from IN byte for byte, tensors written from new values (smoothed norms;
  // quantized modules are not counted in either), bytes written.
  int64_t n_copied = 0;
  std::vector<std::string> replaced;
  uint64_t out_bytes = 0;
  bool stopped = false;  // stop_after_layers: the state is kept, nothing exported
  // The end-to-end phase (e2e_steps > 0): KL and top-1 agreement over the calibration windows (holdout > 0: the
  // held-out ones) before and after,
  // the largest relative change of a scale, its steps, wall time and training tokens/s.
  double e2e_kl_before = 0, e2e_kl_after = 0, e2e_agree_before = 0, e2e_agree_after = 0, e2e_max_scale_change = 0;
  int64_t e2e_steps = 0, e2e_resumed_from = 0;
  int64_t e2e_kept_step = -1;  // holdout > 0: the end-to-end step whose scales were kept (0: the block-wise ones)
  double e2e_kept_kl = 0;      // its held-out KL when it was scored
  double e2e_seconds = 0, e2e_tokens_per_s = 0;
  // keep_outputs: every retrained module's final codes, and the student's residual stream after the last
  // retrained layer over the calibration windows [n_windows * window, H].
  std::map<std::string, QuantWeight> codes;
  std::vector<float> stream;
};

// The dither of step t of `steps` (t 0-based).
double dither_sigma(const PtqrOptions& o, int64_t t);

// Trains (block-wise, then e2e_steps of the end-to-end phase), then writes OUT (compressed-tensors W8A8, `quantize`'s writer). The
// state after each layer goes to OUT.ptqr-state/ (removed after the export);
// resume continues from its last finished layer.
PtqrReport run_ptqr(const PtqrOptions& o);

}  // namespace blockspec
