// compressed-tensors asymmetric integer weights (symmetric: false with
// weight_zero_point) of tests/fixtures/quant, made by
// scripts/make_quant_golden.py with compressed-tensors' own calculate_qparams
// and compressors:
//  - tiny-ct-asym-w4: pack-quantized int4, zero points I32 packed along N;
//    attention group 32, gate/up per channel, down group 128;
//  - tiny-ct-asym-w8-mixed: int8, attention pack-quantized group 16 (packed
//    zero points), gate/up naive-quantized per channel and down int-quantized
//    group 128 with dynamic int8 inputs (zero points I8 [N, ng]).
// They are served as the exact dequantization (q - z) * s (f32, weight-only):
// the loaded weights equal compressed_tensors' dequantize in f32 bit for bit,
// and the logits match HF running the dequantized model in f32 to summation
// order, on every ISA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "formats/quant_config.h"
#include "formats/safetensors.h"
#include "kernels/quant.h"
#include "model/quant_checkpoint.h"
#include "model/transformer.h"

namespace blockspec {
namespace {

// max |ours - HF| / max |HF logit| per row: f32 weights and activations, summation order only.
constexpr double kTolF32 = 1e-5;

std::string fixture(const std::string& n) { return std::string(BS_SOURCE_DIR) + "/tests/fixtures/quant/" + n; }

double worst_logit_err(Transformer& model, const SafetensorsFile& g) {
  const int64_t V = model.config().vocab_size;
  double worst = 0;
  for (int p = 0; p < std::stoi(g.metadata().at("n_prompts")); ++p) {
    const std::string pre = "p" + std::to_string(p) + ".";
    Tensor ids = g.tensor(pre + "input_ids");
    Tensor ref = g.tensor(pre + "logits");
    const int64_t T = ids.numel();
    KvCache cache = model.new_cache(T);
    std::vector<float> logits;
    model.prefill(ids.ptr<int32_t>(), T, cache, logits, /*all_logits=*/true);
    EXPECT_EQ(static_cast<int64_t>(logits.size()), T * V);
    for (int64_t t = 0; t < T; ++t) {
      double mx = 0, scale = 1e-30;
      for (int64_t v = 0; v < V; ++v) {
        mx = std::max(mx, static_cast<double>(std::fabs(logits[t * V + v] - ref.ptr<float>()[t * V + v])));
        scale = std::max(scale, static_cast<double>(std::fabs(ref.ptr<float>()[t * V + v])));
      }
      worst = std::max(worst, mx / scale);
    }
  }
  return worst;
}

int64_t bit_diffs(const float* a, const float* b, int64_t n) {
  int64_t d = 0;
  for (int64_t i = 0; i < n; ++i) d += std::memcmp(a + i, b + i, sizeof(float)) != 0;
  return d;
}

struct AsymCase {
  std::string name;
  // storage_type() must name these (format, width, grouping) for k_proj, up_proj and down_proj.
  std::string k_desc, up_desc, down_desc;
};
const AsymCase kCases[] = {
    {"tiny-ct-asym-w4", "pack-quantized int4 g32 asym", "pack-quantized int4 per-channel asym",
     "pack-quantized int4 g128 asym"},
    {"tiny-ct-asym-w8-mixed", "pack-quantized int8 g16 asym", "naive-quantized int8 per-channel asym",
     "int-quantized int8 g128 asym"},
};

class CtAsymGolden : public ::testing::TestWithParam<AsymCase> {};

TEST_P(CtAsymGolden, SourceServesExactDequantization) {
  const AsymCase& c = GetParam();
  auto qc = load_quant_config(fixture(c.name));
  ASSERT_TRUE(qc.has_value());
  auto src = open_quant_checkpoint(fixture(c.name), *qc);
  SafetensorsFile g(fixture(c.name) + "/golden.safetensors");
  const std::string k0 = "model.layers.0.self_attn.k_proj.weight", up0 = "model.layers.0.mlp.up_proj.weight",
                    d0 = "model.layers.0.mlp.down_proj.weight";
  for (const auto& [n, desc] : {std::pair{k0, c.k_desc}, std::pair{up0, c.up_desc}, std::pair{d0, c.down_desc}}) {
    SCOPED_TRACE(n);
    EXPECT_NE(src->storage_type(n).find(desc), std::string::npos) << src->storage_type(n);
    EXPECT_EQ(src->natural_format(n), WeightFormat::kF32);
    EXPECT_FALSE(src->has_native(n));
    EXPECT_FALSE(src->native_act_int8(n)) << "asymmetric modules run weight-only";
  }
  const Tensor ref_k = g.tensor("ref." + k0);
  const Tensor got_k = src->load(k0);
  ASSERT_EQ(got_k.shape(), ref_k.shape());
  EXPECT_EQ(bit_diffs(got_k.ptr<float>(), ref_k.ptr<float>(), ref_k.numel()), 0) << "k_proj differs from (q - z) * s";
  const Tensor ref_d = g.tensor("ref." + d0 + ".rows16");
  std::vector<float> rows(ref_d.numel());
  src->load_rows(d0, 0, ref_d.dim(0), rows.data());
  EXPECT_EQ(bit_diffs(rows.data(), ref_d.ptr<float>(), ref_d.numel()), 0) << "down_proj rows differ";
  // load_rows of a row range inside the module agrees with the whole-module load.
  const Tensor full_d = src->load(d0);
  std::vector<float> mid(5 * full_d.dim(1));
  src->load_rows(d0, 7, 12, mid.data());
  EXPECT_EQ(bit_diffs(mid.data(), full_d.ptr<float>() + 7 * full_d.dim(1), mid.size()), 0);
}

TEST_P(CtAsymGolden, ModelMatchesHfOnDequantizedModel) {
  const AsymCase& c = GetParam();
  SafetensorsFile g(fixture(c.name) + "/golden.safetensors");
  Tensor ref_k = g.tensor("ref.model.layers.0.self_attn.k_proj.weight");
  Tensor ref_d = g.tensor("ref.model.layers.0.mlp.down_proj.weight.rows16");
  for (const std::string& isa : available_isas()) {
    ModelOptions mo;
    mo.isa = isa;
    auto model = Transformer::load(fixture(c.name), mo);
    const LayerWeights& l = model->weights().layers[0];
    ASSERT_EQ(l.attn_qkv.mats.size(), 1u) << "f32 q/k/v fuse";
    EXPECT_EQ(l.attn_qkv.mats[0].format, WeightFormat::kF32);
    EXPECT_EQ(l.ffn_down.format, WeightFormat::kF32);
    const ModelConfig& cfg = model->config();
    const int64_t H = cfg.hidden_size, nq = cfg.n_heads * cfg.head_dim, nkv = cfg.n_kv_heads * cfg.head_dim;
    ASSERT_EQ(ref_k.shape(), (Shape{nkv, H}));
    Tensor qkv = dequantize_weight(l.attn_qkv.mats[0]);
    EXPECT_EQ(bit_diffs(qkv.ptr<float>() + nq * H, ref_k.ptr<float>(), ref_k.numel()), 0) << "k_proj differs";
    Tensor down = dequantize_weight(l.ffn_down);
    EXPECT_EQ(bit_diffs(down.ptr<float>(), ref_d.ptr<float>(), ref_d.numel()), 0) << "down_proj differs";
    const double e = worst_logit_err(*model, g);
    EXPECT_LE(e, kTolF32) << isa;
    std::printf("[quant golden] %-22s isa=%-6s exact f32: %.3g (tol %.3g)\n", c.name.c_str(), isa.c_str(), e, kTolF32);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CtAsymGolden, ::testing::ValuesIn(kCases), [](const auto& info) {
  std::string n = info.param.name;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

}  // namespace
}  // namespace blockspec
