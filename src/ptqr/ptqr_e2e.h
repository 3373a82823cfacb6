// PTQR's end-to-end phase (issue 18, ../shared/docs/training.md §10.4): after
// the block-wise phase (ptqr.h) every code is fixed and every group's scale
// trains so that the whole student -- each layer run by the serving kernels
// (model/decoder_layer.h on the codes with the current scales, per-token int8
// activations, the trained KV cache dtype) -- matches the teacher's next-token
// distribution. This is EfficientQAT's E2E-QP (Chen et al. 2024, "train the
// quantization parameters end to end with the weights' codes frozen"), with
// the loss of the issue: mean over tokens of KL(teacher || student) at the
// logits. A group's scale moves every code of its 128 weights at once, so the
// phase corrects what a layer-output loss cannot see (the KV cache's and the
// activations' errors as they reach the logits) with few parameters: one per
// 128 weights, whose optimizer state fits next to the model on this machine.
//
// Gradients: dL/dz = (softmax(z_s) - softmax(z_t)) / T through the frozen head
// and final norm, then through every layer's straight-through twin
// (qat_layer.h) in reverse, each on its input from the serving forward (as the
// block-wise phase does per layer); deq = code * scale, so
// dL/d(scale of row n, group g) = sum over the group's k of code_k dL/d(deq_k).
// Scales train as multipliers m of their block-wise values (s = round(s_0 m)
// to the storage dtype, straight through; AdamW on m, so one rate suits every
// row whatever its magnitude). The head and final norm are the teacher's, in
// f32 (neither is quantized in the export).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/hf_config.h"
#include "kernels/kv_kernels.h"
#include "kernels/ops.h"
#include "model/weight_source.h"
#include "ptqr/qat_layer.h"
#include "ptqr/student.h"
#include "quantize/quantizer.h"
#include "train/optim.h"

namespace blockspec {

// One layer of the student in this phase: its groups with the codes and current scales of every part
// (StudentPart::qw; the masters StudentPart::w are unused), their biases, and the frozen norms.
struct E2eLayer {
  StudentGroup qkv, o, gu, down;
  std::vector<float> attn_norm, ffn_norm, q_norm, k_norm;  // q/k norms: Qwen3 only
  // Per group, per part: dL/d(scale) [N, n_groups], accumulated by e2e_window_grads.
  std::vector<std::vector<float>> scale_grad[4];
  StudentGroup* group(int i) { return i == 0 ? &qkv : i == 1 ? &o : i == 2 ? &gu : &down; }
};

// g.deq [N, K] = code * scale of every part (StudentPart::qw); g.grad [N, K] = 0.
void e2e_fill_deq(StudentGroup& g, ThreadPool& pool);

// The straight-through twin of e (its groups' deq and grad are the caller's to fill).
QatLayer e2e_twin(const ModelConfig& c, const RopeTables& rope, KvDType kv, E2eLayer& e);

// The final norm [H] and head [V, H] (f32), with head^T [H, V] for the backward.
struct E2eHead {
  std::vector<float> norm, w, w_t;
  int64_t V = 0;
};

// One window of T tokens: xs[l] [T, H] is the input of layer l in the student's forward and x_final [T, H] the
// output of the last; zt [T, V] the teacher's logits. Returns the mean per-token KL(teacher || student) of the
// logits of x_final, and adds dL/d(scale) of every part of every layer to E2eLayer::scale_grad (sized here).
// Each layer's deq and grad buffers exist only while its backward runs. agree (nullable): tokens whose student
// argmax is the teacher's.
double e2e_window_grads(const OpContext& ctx, const ModelConfig& c, const RopeTables& rope, KvDType kv,
                        const E2eHead& head, std::vector<E2eLayer>& layers, const std::vector<const float*>& xs,
                        const float* x_final, const float* zt, int64_t T, int64_t* agree);

// Logits z [T, V] of the final stream x [T, H]: head(rmsnorm(x)).
void e2e_logits(const OpContext& ctx, const ModelConfig& c, const E2eHead& head, const float* x, int64_t T, float* z);

struct PtqrE2eOptions {
  int64_t steps = 0;                   // optimizer steps, one window each
  double lr = 1e-4;                    // peak AdamW rate of the scale multipliers (cosine, warm-up)
  double warmup_frac = 0.05, lr_floor = 0.1;
  int64_t window = 512;
  KvDType kv = KvDType::kF32;
  int64_t holdout = 0;                 // the last n windows never train: every val_every steps and at the end their
  int64_t val_every = 10;              // KL is scored, and the scales of the lowest score (step 0 included) are kept
  uint64_t seed = 0;
  int64_t stop_after = -1;             // stop (checkpoint saved, scales not final) once this many steps are done
  bool progress = true;
};

// What resumes the phase: the step count, every module's multipliers and AdamW moments, the losses so far.
struct E2eCheckpoint {
  int64_t step = 0;
  std::map<std::string, std::vector<float>> mult;
  std::map<std::string, std::vector<double>> m, v;
  std::vector<double> step_kl;
  double kl_before = 0, agree_before = 0;  // of the block-wise scales, measured when the phase started
  // holdout > 0: the step of the lowest held-out KL so far, that KL, and its multipliers (empty: step 0, all 1).
  int64_t best_step = 0;
  double best_kl = 0;
  std::map<std::string, std::vector<float>> best_mult;
};

struct PtqrE2eReport {
  double kl_before = 0, kl_after = 0;      // mean KL over every calibration window (holdout > 0: the held-out
                                           // ones; after: of the kept scales), exact serving forward
  double agree_before = 0, agree_after = 0;  // student argmax == teacher argmax, fraction of tokens
  double max_scale_change = 0;             // largest |s / s_0 - 1| over every scale
  std::vector<double> step_kl;             // the training window's KL at each step
  double seconds = 0, tokens_per_s = 0;
  int64_t resumed_from = 0;
  int64_t kept_step = -1;                  // holdout > 0: the step whose scales were kept (0: the block-wise ones)
  double kept_kl = 0;                      // and its held-out KL when it was scored (equals kl_after)
  bool stopped = false;                    // stop_after reached before `steps`
};

// Trains the scales of `codes` (every module of layers 0 .. c.n_layers - 1, updated in place) against the
// teacher's final stream teacher_final [n_windows * window, H]. student: the student's norms and biases (the
// smoothed model with any trained vectors laid over); teacher: the head and the final norm. resume: a checkpoint
// of the same phase to continue from (nullptr: start), whose multipliers apply to the scales `codes` holds (the
// block-wise ones); save: called with the state every 5 steps and at the end.
PtqrE2eReport run_ptqr_e2e(const OpContext& ctx, const ModelConfig& c, const RopeTables& rope,
                           const WeightSource& teacher, const WeightSource& student,
                           const std::vector<std::vector<int32_t>>& windows, const std::vector<float>& teacher_final,
                           std::map<std::string, QuantWeight>& codes, const PtqrE2eOptions& o,
                           const E2eCheckpoint* resume, const std::function<void(const E2eCheckpoint&)>& save);

}  // namespace blockspec
