// Quantized checkpoints (GPTQ v1/v2, compressed-tensors pack-quantized /
// int-quantized, mixed precision) of tests/fixtures/quant, made by
// scripts/make_quant_golden.py:
//  - the loaded weights dequantize BIT-EXACTLY to the reference
//    dequantization (compressed_tensors' dequantize in f32; the GPTQ formula
//    s * (q - z)), through the fused q/k/v matrix;
//  - with --weights f32 (exact dequantization) the logits match HF running
//    the dequantized model in f32 to f32 summation-order noise;
//  - natively, weight-only modules (GPTQ, compressed-tensors W4A16 / W8A16)
//    run f32 activations against the stored codes, so a fixture without W8A8
//    modules matches HF on the dequantized model to kTolF32; with W8A8
//    modules (int8 input_activations: the engine quantizes activations per
//    token before those linears, as the checkpoint declares and vLLM does) the logits match HF with that
//    activation quantization simulated on exactly those modules
//    (p{i}.logits_a8) within kTolA8, and HF without it within kTolNative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "formats/safetensors.h"
#include "../logits_compare.h"
#include "kernels/quant.h"
#include "model/quant_checkpoint.h"
#include "model/transformer.h"

namespace blockspec {
namespace {

struct Case {
  std::string name;
  std::string attn_format, mlp_format;  // expected native formats
  bool mlp_a8;                          // the MLP is W8A8 (attention is weight-only in every case)
};
const Case kCases[] = {
    {"qwen3-gptq-w4g128", "q4", "q4", false},
    {"qwen3-gptqv2-w8ch", "q8", "q8", false},
    {"qwen3-ct-w4g128", "q4", "q4", false},
    {"llama-ct-mixed", "q4", "q8", true},
};

// max |ours - HF| / max |HF logit| per row.
// f32 weights (exact dequantization) and f32 activations: summation order only.
constexpr double kTolF32 = 1e-5;
// Native vs HF with the same int8 activation quantization simulated in torch:
// identical weights and activation codes, so only f32 summation order differs
// (measured <= 9e-7, printed below). A pre-activation that differed in its
// last bit could round to the neighbouring int8 code; none does in these
// fixtures, and the margin covers a rare one.
constexpr double kTolA8 = 1e-5;
// Native vs the weight-only reference: the activation rounding itself moves
// these tiny random models' logits by 3-5% of the largest logit (the same
// amount the torch simulation shows: 0.047 for qwen3-ct-w4g128 in both), so
// this bound only guards against gross errors; kTolA8 is the precise check.
// (A per-token W8A8 reference such as vLLM's would differ too: our groups of
// 128 are finer than one scale per token.)
constexpr double kTolNative = 6e-2;

std::string fixture(const std::string& n) { return std::string(BS_SOURCE_DIR) + "/tests/fixtures/quant/" + n; }

double worst_logit_err(Transformer& model, const SafetensorsFile& g, const std::string& key = "logits") {
  const int64_t V = model.config().vocab_size;
  double worst = 0;
  for (int p = 0; p < std::stoi(g.metadata().at("n_prompts")); ++p) {
    const std::string pre = "p" + std::to_string(p) + ".";
    Tensor ids = g.tensor(pre + "input_ids");
    Tensor ref = g.tensor(pre + key);
    const int64_t T = ids.numel();
    KvCache cache = model.new_cache(T);
    std::vector<float> logits;
    model.prefill(ids.ptr<int32_t>(), T, cache, logits, /*all_logits=*/true);
    EXPECT_EQ(static_cast<int64_t>(logits.size()), T * V);
    for (int64_t t = 0; t < T; ++t) worst = std::max(worst, rel_err(&logits[t * V], ref.ptr<float>() + t * V, V));
  }
  return worst;
}

class QuantGolden : public ::testing::TestWithParam<Case> {};

TEST_P(QuantGolden, WeightsDequantizeBitExactly) {
  const Case& c = GetParam();
  auto model = Transformer::load(fixture(c.name), ModelOptions{});
  const ModelConfig& cfg = model->config();
  const LayerWeights& l = model->weights().layers[0];
  EXPECT_NE(model->weights().format_summary.find(c.attn_format), std::string::npos) << model->weights().format_summary;
  ASSERT_EQ(l.attn_qkv.mats.size(), 1u) << "q/k/v of one native format fuse";
  EXPECT_EQ(weight_format_name(l.attn_qkv.mats[0].format), c.attn_format);
  ASSERT_EQ(l.ffn_gate_up.mats.size(), 1u);
  EXPECT_EQ(weight_format_name(l.ffn_gate_up.mats[0].format), c.mlp_format);
  EXPECT_EQ(weight_format_name(l.ffn_down.format), c.mlp_format);
  EXPECT_FALSE(l.attn_qkv.mats[0].act_int8) << "attention is weight-only";
  EXPECT_FALSE(l.attn_o.act_int8);
  EXPECT_EQ(l.ffn_gate_up.mats[0].act_int8, c.mlp_a8);
  EXPECT_EQ(l.ffn_down.act_int8, c.mlp_a8);
  SafetensorsFile g(fixture(c.name) + "/golden.safetensors");
  // k_proj: rows [nq, nq + nkv) of the fused q/k/v matrix.
  Tensor ref_k = g.tensor("ref.model.layers.0.self_attn.k_proj.weight");
  const int64_t H = cfg.hidden_size, nq = cfg.n_heads * cfg.head_dim, nkv = cfg.n_kv_heads * cfg.head_dim;
  ASSERT_EQ(ref_k.shape(), (Shape{nkv, H}));
  Tensor qkv = dequantize_weight(l.attn_qkv.mats[0]);
  int64_t diffs = 0;
  for (int64_t i = 0; i < nkv * H; ++i) diffs += qkv.ptr<float>()[nq * H + i] != ref_k.ptr<float>()[i];
  EXPECT_EQ(diffs, 0) << "k_proj values differing from the reference dequantization";
  Tensor ref_d = g.tensor("ref.model.layers.0.mlp.down_proj.weight.rows16");
  Tensor down = dequantize_weight(l.ffn_down);
  ASSERT_EQ(ref_d.dim(1), down.dim(1));
  diffs = 0;
  for (int64_t i = 0; i < ref_d.numel(); ++i) diffs += down.ptr<float>()[i] != ref_d.ptr<float>()[i];
  EXPECT_EQ(diffs, 0) << "down_proj values differing from the reference dequantization";
  // --weights equal to the native format keeps the stored codes (no re-quantization).
  ModelOptions same;
  same.weights = l.attn_qkv.mats[0].format;
  auto model2 = Transformer::load(fixture(c.name), same);
  const QuantTensor& a = l.attn_qkv.mats[0];
  const QuantTensor& b = model2->weights().layers[0].attn_qkv.mats[0];
  ASSERT_EQ(a.data.nbytes(), b.data.nbytes());
  EXPECT_EQ(0, std::memcmp(a.data.data(), b.data.data(), a.data.nbytes()));
  EXPECT_EQ(0, std::memcmp(a.scales.data(), b.scales.data(), a.scales.nbytes()));
  EXPECT_EQ(a.act_int8, b.act_int8);
}

TEST_P(QuantGolden, LogitsMatchHfOnDequantizedModel) {
  const Case& c = GetParam();
  SafetensorsFile g(fixture(c.name) + "/golden.safetensors");
  ModelOptions f32;
  f32.weights = WeightFormat::kF32;  // dequantized exactly
  auto exact = Transformer::load(fixture(c.name), f32);
  const double e32 = worst_logit_err(*exact, g);
  EXPECT_LE(e32, kTolF32);
  for (const std::string& isa : available_isas()) {
    ModelOptions mo;
    mo.isa = isa;
    auto native = Transformer::load(fixture(c.name), mo);
    const double en = worst_logit_err(*native, g);
    if (!c.mlp_a8) {  // all weight-only: the dequantized model itself
      EXPECT_LE(en, kTolF32) << isa;
      std::printf("[quant golden] %-18s --weights f32: %.3g (tol %.3g)  native (weight-only) isa=%-6s: vs HF %.3g "
                  "(tol %.3g)\n", c.name.c_str(), e32, kTolF32, isa.c_str(), en, kTolF32);
      continue;
    }
    const double ea = worst_logit_err(*native, g, "logits_a8");
    EXPECT_LE(en, kTolNative) << isa;
    EXPECT_LE(ea, kTolA8) << isa;
    std::printf("[quant golden] %-18s --weights f32: %.3g (tol %.3g)  native isa=%-6s: vs HF+A8 %.3g (tol %.3g), "
                "vs HF %.3g (tol %.3g)\n",
                c.name.c_str(), e32, kTolF32, isa.c_str(), ea, kTolA8, en, kTolNative);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantGolden, ::testing::ValuesIn(kCases), [](const auto& info) {
  std::string n = info.param.name;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

// ---- GPTQ asymmetric (v1 whole-word z - 1, v2) and act-order (desc_act, permuted g_idx) ----
// Served as the exact dequantization s[g_idx[k], n] * (q - z[g_idx[k], n]) (f32, weight-only): the loaded
// weights equal the reference bit for bit and the logits match HF on the dequantized model to summation order.
class GptqDenseGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(GptqDenseGolden, ExactF32DequantizationAndLogits) {
  const std::string name = GetParam();
  SafetensorsFile g(fixture(name) + "/golden.safetensors");
  auto qc = load_quant_config(fixture(name));
  ASSERT_TRUE(qc.has_value());
  auto src = open_quant_checkpoint(fixture(name), *qc);
  const std::string k0 = "model.layers.0.self_attn.k_proj.weight", d0 = "model.layers.0.mlp.down_proj.weight";
  EXPECT_EQ(src->natural_format(k0), WeightFormat::kF32);
  EXPECT_FALSE(src->has_native(k0));
  EXPECT_NE(src->storage_type(k0).find(qc->gptq.sym ? "" : " asym"), std::string::npos) << src->storage_type(k0);
  // down_proj (K = 256, 4 groups of 64) has a non-trivial g_idx; k_proj (K = 64, one group) cannot.
  if (qc->gptq.desc_act) EXPECT_NE(src->storage_type(d0).find("act-order"), std::string::npos) << src->storage_type(d0);
  Tensor ref_d = g.tensor("ref." + d0 + ".rows16");
  std::vector<float> rows(ref_d.numel());
  src->load_rows(d0, 0, ref_d.dim(0), rows.data());
  EXPECT_EQ(0, std::memcmp(rows.data(), ref_d.data(), ref_d.nbytes())) << "down_proj rows differ from s * (q - z)";
  for (const std::string& isa : available_isas()) {
    ModelOptions mo;
    mo.isa = isa;
    auto model = Transformer::load(fixture(name), mo);
    const LayerWeights& l = model->weights().layers[0];
    ASSERT_EQ(l.attn_qkv.mats.size(), 1u);
    EXPECT_EQ(l.attn_qkv.mats[0].format, WeightFormat::kF32);
    EXPECT_EQ(l.ffn_down.format, WeightFormat::kF32);
    const ModelConfig& cfg = model->config();
    const int64_t H = cfg.hidden_size, nq = cfg.n_heads * cfg.head_dim, nkv = cfg.n_kv_heads * cfg.head_dim;
    Tensor ref_k = g.tensor("ref." + k0);
    ASSERT_EQ(ref_k.shape(), (Shape{nkv, H}));
    Tensor qkv = dequantize_weight(l.attn_qkv.mats[0]);
    EXPECT_EQ(0, std::memcmp(qkv.ptr<float>() + nq * H, ref_k.data(), ref_k.nbytes())) << "k_proj differs";
    const double e = worst_logit_err(*model, g);
    EXPECT_LE(e, kTolF32) << isa;
    std::printf("[quant golden] %-32s isa=%-6s exact f32: %.3g (tol %.3g)\n", name.c_str(), isa.c_str(), e, kTolF32);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, GptqDenseGolden,
                         ::testing::Values("tiny-gptq-asym-w4g32", "tiny-gptqv2-asym-actorder-w8g64"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// ---- compressed-tensors FP8 (float-quantized) / NVFP4 / MXFP4 (weight-only) ----
// The stored codes and scales load as kFP8_E4M3 / kNVFP4 / kMXFP4 QuantTensors (fp_native, the model's
// default: natural_format is the FP format, compressed in memory) whose dequantization equals
// compressed_tensors' dequantize in f32 bit for bit; the FP kernels multiply with those exact values, so the
// native model matches both HF on the dequantized model and our own --weights f32 run to summation order.
// q/k/v fuse into one matrix when their format (and NVFP4 global scale) agree.
struct FpCase {
  std::string name, fmt;
  bool qkv_fused;  // the fixture's NVFP4 q/k/v have their own global scales: they stay 3 matrices
};
const FpCase kFpCases[] = {
    {"tiny-ct-fp8", "fp8", true},
    {"tiny-ct-nvfp4", "nvfp4", false},
    {"tiny-ct-mxfp4", "mxfp4", true},
};

class FpGolden : public ::testing::TestWithParam<FpCase> {};

TEST_P(FpGolden, NativeCodesDequantizeBitExactly) {
  const FpCase& c = GetParam();
  auto qc = load_quant_config(fixture(c.name));
  ASSERT_TRUE(qc.has_value());
  auto src = open_quant_checkpoint(fixture(c.name), *qc);
  SafetensorsFile g(fixture(c.name) + "/golden.safetensors");
  for (const std::string m : {"model.layers.0.self_attn.k_proj", "model.layers.0.mlp.down_proj"}) {
    SCOPED_TRACE(m);
    const QuantTensor q = load_fp_native(*src, m + ".weight");
    EXPECT_STREQ(weight_format_name(q.format), c.fmt.c_str());
    EXPECT_STREQ(weight_format_name(src->natural_format(m + ".weight")), c.fmt.c_str());
    EXPECT_TRUE(src->has_fp_native(m + ".weight"));
    const bool full = m.find("k_proj") != std::string::npos;
    Tensor ref = g.tensor("ref." + m + ".weight" + (full ? "" : ".rows16"));
    Tensor d = dequantize_weight(q);
    std::vector<float> rows(ref.numel());
    src->load_rows(m + ".weight", 0, ref.dim(0), rows.data());
    int64_t diffs = 0, diffs_rows = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      uint32_t a, b, r;
      std::memcpy(&a, d.ptr<float>() + i, 4);
      std::memcpy(&b, rows.data() + i, 4);
      std::memcpy(&r, ref.ptr<float>() + i, 4);
      diffs += a != r;
      diffs_rows += b != r;
    }
    EXPECT_EQ(diffs, 0) << "native dequantization differs from compressed_tensors' in f32";
    EXPECT_EQ(diffs_rows, 0) << "load_rows differs from compressed_tensors' dequantization";
    // Bytes held: codes + scales only (compressed in memory).
    EXPECT_LT(q.nbytes(), static_cast<size_t>(q.rows * q.cols * (c.fmt == "fp8" ? 2 : 1)));
  }
}

TEST_P(FpGolden, LogitsMatchHfOnDequantizedModel) {
  const FpCase& c = GetParam();
  SafetensorsFile g(fixture(c.name) + "/golden.safetensors");
  ModelOptions f32;
  f32.weights = WeightFormat::kF32;  // dequantized exactly
  auto exact = Transformer::load(fixture(c.name), f32);
  const double e32 = worst_logit_err(*exact, g);
  EXPECT_LE(e32, kTolF32);
  const ModelConfig& cfg = exact->config();
  const int64_t H = cfg.hidden_size, nq = cfg.n_heads * cfg.head_dim, nkv = cfg.n_kv_heads * cfg.head_dim;
  Tensor ref_k = g.tensor("ref.model.layers.0.self_attn.k_proj.weight");
  for (const std::string& isa : available_isas()) {
    ModelOptions mo;
    mo.isa = isa;
    auto native = Transformer::load(fixture(c.name), mo);  // no --weights: the stored FP codes
    const LayerWeights& l = native->weights().layers[0];
    EXPECT_NE(native->weights().format_summary.find(c.fmt), std::string::npos) << native->weights().format_summary;
    EXPECT_STREQ(weight_format_name(l.ffn_down.format), c.fmt.c_str());
    EXPECT_STREQ(weight_format_name(l.attn_o.format), c.fmt.c_str());
    ASSERT_EQ(l.attn_qkv.mats.size(), c.qkv_fused ? 1u : 3u);
    for (const QuantTensor& m : l.attn_qkv.mats) EXPECT_STREQ(weight_format_name(m.format), c.fmt.c_str());
    // k_proj rows (of the fused matrix, or the second part) are the reference bit for bit.
    Tensor k = dequantize_weight(c.qkv_fused ? l.attn_qkv.mats[0] : l.attn_qkv.mats[1]);
    EXPECT_EQ(0, std::memcmp(k.ptr<float>() + (c.qkv_fused ? nq * H : 0), ref_k.data(), nkv * H * sizeof(float)));
    const double en = worst_logit_err(*native, g);
    EXPECT_LE(en, kTolF32) << isa;
    // Against our own f32 run of the same exact values.
    double vs32 = 0;
    for (int p = 0; p < std::stoi(g.metadata().at("n_prompts")); ++p) {
      Tensor ids = g.tensor("p" + std::to_string(p) + ".input_ids");
      const int64_t T = ids.numel(), V = cfg.vocab_size;
      std::vector<float> a, b;
      KvCache ca = native->new_cache(T), cb = exact->new_cache(T);
      native->prefill(ids.ptr<int32_t>(), T, ca, a, /*all_logits=*/true);
      exact->prefill(ids.ptr<int32_t>(), T, cb, b, /*all_logits=*/true);
      for (int64_t t = 0; t < T; ++t) vs32 = std::max(vs32, rel_err(&a[t * V], &b[t * V], V));
    }
    EXPECT_LE(vs32, kTolF32) << isa;
    std::printf("[quant golden] %-14s native %s isa=%-6s: vs HF %.3g, vs --weights f32 %.3g (tol %.3g); "
                "--weights f32 vs HF %.3g\n", c.name.c_str(), c.fmt.c_str(), isa.c_str(), en, vs32, kTolF32, e32);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, FpGolden, ::testing::ValuesIn(kFpCases), [](const auto& info) {
  std::string n = info.param.name;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

}  // namespace
}  // namespace blockspec
