// PTQR's student (issue 18, ../shared/docs/training.md §10): the linears of
// one decoder layer as latent f32 masters whose quantization -- with a
// dither on each rounding decision while training, exactly the writer's at
// sigma = 0 -- gives the codes and scales the serving kernels run. A group is
// the linears that share an input (q | k | v, o, gate | up, down); its
// dequantized weights, gradients and biases are kept fused, rows in part
// order, as the model fuses them (model/weights.h LinearGroup).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/ops.h"
#include "model/weights.h"
#include "quantize/quantizer.h"
#include "train/optim.h"

namespace blockspec {

struct StudentPart {
  std::string module;       // "model.layers.3.self_attn.q_proj"
  int64_t N = 0;            // its rows of the group
  std::vector<float> w;     // latent master [N, K]
  QuantWeight qw;           // codes and scales of the current step
  std::unique_ptr<AdamW> opt;
};

struct StudentGroup {
  int64_t K = 0, N = 0;          // N: rows of all parts
  std::vector<StudentPart> parts;
  std::vector<float> deq;        // [N, K] what the current codes stand for (code * scale)
  std::vector<float> grad;       // [N, K] dL/d(deq) = dL/dw by the straight-through estimator
  std::vector<float> bias;       // [N] (0 for parts without one); empty when no part has one
  std::vector<float> bias_grad;  // [N] dL/d(bias) when the biases train (ptqr --train-vectors), else empty
};

// Quantizes every part's master w on spec's grid into its codes (qw) and the
// group's deq. Scales: make_params (the writer's rule, recomputed from w).
// sigma == 0: quantize_rtn, the writer's rounding, bit for bit. sigma > 0:
// q = clamp(floor(u + 1/2 + sigma * xi), qmin, qmax) with u = w / s (a
// division, as the writer does) and xi ~ U(-1/2, 1/2) drawn from an Rng
// seeded by (seed, part, row), so the result does not depend on the threads.
void requantize(StudentGroup& g, const QuantSpec& spec, double sigma, uint64_t seed, ThreadPool& pool);

// Whether the serving kernels round a linear's input per token to int8 under this spec (W8A8), or keep it f32
// (the weight-only W4A16 and W8A16).
bool ptqr_acts_int8(const QuantSpec& spec);

// The serving weight of the group's current codes: one fused Q8_G128 (W8A8, W8A16) or Q4_G128 (W4A16) matrix,
// with per-token int8 activations for W8A8, what a compressed-tensors checkpoint of these codes loads as
// (kernels/quant_import.h make_weight_from_codes).
QuantTensor serving_weight(const OpContext& ctx, const StudentGroup& g);

// ||w - deq|| / ||w|| of one part (the audit of the model cards).
double relative_dequant_error(const StudentGroup& g, size_t part);

}  // namespace blockspec
