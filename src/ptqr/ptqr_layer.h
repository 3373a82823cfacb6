// One decoder layer under PTQR (ptqr.h): its teacher (bf16 weights, f32
// activations and KV), its student groups, the exact serving forward of the
// student's current codes (model/decoder_layer.h, the layer `serve` runs) and
// a training step. Windows are causal sequences of T tokens at positions 0..T-1.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <memory>
#include <tuple>
#include <vector>

#include "formats/hf_config.h"
#include "kernels/kv_kernels.h"
#include "kernels/ops.h"
#include "model/weight_source.h"
#include "model/weights.h"
#include "ptqr/qat_layer.h"
#include "ptqr/student.h"
#include "quantize/quantizer.h"
#include "train/optim.h"

namespace blockspec {

// The G128 spec `blockspec quantize --scheme S` would use for this source's weights (S: w8a8, w8a16, w4a16).
QuantSpec ptqr_spec(const WeightSource& src, int64_t group, QScheme scheme = QScheme::kW8A8);

// Per-token relative error of y_s against y_t, both [T, H]: (1/T) sum_t ||y_s - y_t||^2 / ||y_t||^2;
// dy (nullable) [T, H] gets its gradient with respect to y_s.
double layer_loss(const float* y_s, const float* y_t, int64_t T, int64_t H, float* dy);

// A tensor of src as f32 values (matrices through WeightSource::load_rows).
std::vector<float> load_f32_tensor(const WeightSource& src, const std::string& name);

// The biases of a group of modules under prefix p, fused in part order: empty when no module has one, else
// each module's bias or zeros for a module without one.
std::vector<float> group_bias(const WeightSource& src, const std::string& p, std::initializer_list<const char*> mods);

// A 1-D F32 view of v (an empty Tensor for an empty v); v must outlive it.
Tensor f32_view(const std::vector<float>& v);

// The layer lw over n rows x [n, H] in place: windows of `window` rows, each a fresh sequence at positions
// 0 .. window - 1 with a KV cache of dtype kv (the serving decoder_layer).
void run_layer_windows(const OpContext& ctx, const ModelConfig& c, const RopeTables& rope, const LayerWeights& lw,
                       KvDType kv, int64_t window, float* x, int64_t n);

// The linears of a layer from its groups q|k|v, o, gate|up, down: serving[4] the served matrices of the groups
// (nullptr: bf16 matrices of the groups' masters, the teacher's). Norms are set by the caller.
LayerWeights layer_linears(const OpContext& ctx, StudentGroup* const* groups, const QuantTensor* serving);

class PtqrLayer {
 public:
  // The teacher's weights come from `teacher`, the student's initial masters and norms from `student` (the same
  // source, or the model after SmoothQuant's migration: quantize/smooth.h).
  // train_vectors: the student's two norms and its biases train too (AdamW at their own rate; the forward runs
  // the masters rounded to the stored dtype, which is what the export writes).
  PtqrLayer(const OpContext& ctx, const ModelConfig& c, const RopeTables& rope, const WeightSource& teacher,
            const WeightSource& student, int64_t layer, const QuantSpec& spec, KvDType kv, bool train_vectors = false);
  PtqrLayer(const PtqrLayer&) = delete;  // the layer weights view its members
  PtqrLayer& operator=(const PtqrLayer&) = delete;
  // The teacher layer over n rows (windows of `window` rows), in place.
  void run_teacher(int64_t window, float* x, int64_t n) const;
  // New codes of every group from the masters (student.h requantize) and the serving weights of them.
  void requantize(double sigma, uint64_t seed);
  // The student's serving forward over windows of x_s [n, H]: the mean layer_loss against y_t; y_out
  // (nullable) [n, H] gets the outputs.
  double serving_loss(int64_t window, const float* x_s, const float* y_t, int64_t n, float* y_out) const;
  // One optimizer step on one window x_s, y_t [T, H]: loss and dL/dy from the serving forward of the current
  // codes, gradients through the straight-through twin, AdamW (t: 1-based step count) on every master.
  double train_step(int64_t T, const float* x_s, const float* y_t, double lr, int64_t t, const AdamWOptions& ao,
                    double lr_vectors = 0);
  // Every latent master (each part's weights, then each trained vector) in a fixed order, and setting them back
  // (the held-out selection of ptqr.h keeps the best step's); the codes follow at the next requantize.
  std::vector<std::vector<float>> masters() const;
  void set_masters(const std::vector<std::vector<float>>& m);
  // The trained norms and biases (HF name, values as the forward ran them); empty without train_vectors.
  std::vector<std::pair<std::string, std::vector<float>>> export_vectors() const;
  // Every part's module, current codes and ||W - deq|| / ||W||.
  std::vector<std::tuple<std::string, QuantWeight, double>> export_codes() const;
  // For tests.
  const LayerWeights& student_weights() const { return student_; }
  QatLayer twin();

 private:
  void run(const LayerWeights& lw, KvDType kv, int64_t window, float* x, int64_t n) const;
  const OpContext& ctx_;
  const ModelConfig& c_;
  const RopeTables& rope_;
  QuantSpec spec_;
  KvDType kv_;
  std::vector<float> attn_norm_, ffn_norm_, q_norm_, k_norm_;  // the student's
  std::vector<float> t_attn_norm_, t_ffn_norm_;                 // the teacher's (q / k norms are shared)
  StudentGroup qkv_, o_, gu_, down_;
  struct TrainedVector {
    std::string name;           // HF tensor name
    std::vector<float> master;  // latent f32 values
    DType dtype;                // stored dtype: the forward runs master rounded to it
    float* live;                // where the forward reads them (a norm, or a part's rows of a group's bias)
    const float* grad;          // their gradient
    std::unique_ptr<AdamW> opt;
  };
  std::vector<TrainedVector> vecs_;
  std::vector<float> attn_norm_grad_, ffn_norm_grad_;
  std::vector<std::vector<float>> teacher_bias_;  // the teacher's biases (its layer weights view them)
  LayerWeights teacher_, student_;
};

}  // namespace blockspec
