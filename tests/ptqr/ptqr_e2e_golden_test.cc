// PTQR's end-to-end phase (ptqr/ptqr_e2e.h) against PyTorch autograd (issue 18 proof "Gradients").
// tests/fixtures/ptqr/ptqr_e2e_grad.safetensors (scripts/make_ptqr_e2e_golden.py, float32 torch, written from the
// definitions) holds a student of two W8A8 layers (H 128, 2 query / 1 KV heads x 64, I 256, T 16, V 96) with
// fixed int8 codes times trainable per-group scales, per-token int8 activations and the KV rounding as fake
// quantization, the final norm and a frozen head, in two cases (qwen2: q/k/v biases, int8_block_g128 KV; qwen3:
// q/k norms, f32 KV); the loss is the mean KL(teacher || student) of the logits against the float model's, and
// the fixture has the gradient of every scale.
//
// e2e_window_grads takes the layer inputs of the student's forward; here they come from the twins' forward
// (qat_forward, the same f32 fake quantization as the script), so the comparison is of the backward chain: the
// KL's gradient, the head and final norm, every layer's twin in reverse, and sum_k code_k dL/d(deq_k) per group.
// As in ptqr_grad_golden_test.cc a rounding decision within an ulp of a boundary may differ between the two
// f32 sides; tolerances: loss relative kLossTol, scale gradients ||d||inf / ||ref||inf per module kGradTol.
// Measured on the 2-core AVX-512 EPYC: see the [ measured ] lines.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "formats/safetensors.h"
#include "kernels/kernel_table.h"
#include "ptqr/ptqr_e2e.h"
#include "ptqr/qat_layer.h"

namespace blockspec {
namespace {

constexpr double kYTol = 5e-3, kLossTol = 1e-3, kGradTol = 3e-2;

template <typename T>
std::vector<T> values(const SafetensorsFile& f, const std::string& n, DType dt) {
  const Tensor t = f.tensor(n);
  if (t.dtype() != dt) fail(n, ": unexpected dtype");
  std::vector<T> v(t.numel());
  std::memcpy(v.data(), t.data(), v.size() * sizeof(T));
  return v;
}
std::vector<float> f32(const SafetensorsFile& f, const std::string& n) { return values<float>(f, n, DType::kF32); }

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

QuantSpec w8_spec() {
  QuantSpec s;
  s.scheme = QScheme::kW8A8, s.bits = 8, s.group = 128, s.scale_dtype = DType::kF32;
  return s;
}

StudentGroup group(const SafetensorsFile& f, const std::string& p, std::initializer_list<const char*> mods, int64_t K) {
  StudentGroup g;
  g.K = K;
  bool bias = false;
  for (const char* m : mods) bias |= f.has(p + "." + m + ".bias");
  for (const char* m : mods) {
    StudentPart part;
    part.module = m;
    QuantWeight& qw = part.qw;
    qw.spec = w8_spec();
    qw.q = values<int8_t>(f, p + "." + m + ".codes", DType::kI8);
    qw.scale = f32(f, p + "." + m + ".scales");
    qw.K = K, qw.N = static_cast<int64_t>(qw.q.size()) / K;
    qw.group_len = 128, qw.n_groups = K / 128;
    part.N = qw.N;
    if (bias) {
      const std::vector<float> b = f32(f, p + "." + m + ".bias");
      g.bias.insert(g.bias.end(), b.begin(), b.end());
    }
    g.N += part.N;
    g.parts.push_back(std::move(part));
  }
  return g;
}

class PtqrE2eGolden : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(PtqrE2eGolden, ScaleGradientsMatchTorch) {
  const auto& [c, isa] = GetParam();
  const SafetensorsFile f(std::string(BS_SOURCE_DIR) + "/tests/fixtures/ptqr/ptqr_e2e_grad.safetensors");
  const nlohmann::json cfg = nlohmann::json::parse(f.metadata().at("config"));
  const nlohmann::json cc = cfg.at("cases").at(c);
  ModelConfig mc;
  mc.arch = cc.at("qk_norm").get<bool>() ? Arch::kQwen3 : Arch::kQwen2;
  mc.hidden_size = cfg.at("H"), mc.n_heads = cfg.at("n_heads"), mc.n_kv_heads = cfg.at("n_kv_heads");
  mc.head_dim = cfg.at("head_dim"), mc.intermediate_size = cfg.at("intermediate");
  mc.rms_norm_eps = cfg.at("rms_norm_eps");
  const int64_t H = mc.hidden_size, I = mc.intermediate_size, T = cfg.at("T"), V = cfg.at("V"), L = cfg.at("layers");
  const KvDType kv = *kv_dtype_from_name(cc.at("kv").get<std::string>());
  RopeTables rope;
  rope.inv_freq = f32(f, c + ".inv_freq");
  rope.rotary_dim = mc.head_dim;
  const KernelTable kt = select_kernels(isa);
  ThreadPool pool(2);
  const OpContext ctx{&kt, &pool};
  std::vector<E2eLayer> layers(L);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = c + ".layers." + std::to_string(l);
    E2eLayer& e = layers[l];
    e.attn_norm = f32(f, p + ".input_layernorm"), e.ffn_norm = f32(f, p + ".post_attention_layernorm");
    if (mc.arch == Arch::kQwen3) e.q_norm = f32(f, p + ".q_norm"), e.k_norm = f32(f, p + ".k_norm");
    e.qkv = group(f, p, {"q_proj", "k_proj", "v_proj"}, H);
    e.o = group(f, p, {"o_proj"}, mc.n_heads * mc.head_dim);
    e.gu = group(f, p, {"gate_proj", "up_proj"}, H);
    e.down = group(f, p, {"down_proj"}, I);
  }
  E2eHead head;
  head.V = V;
  head.norm = f32(f, c + ".final_norm");
  head.w = f32(f, c + ".head");
  head.w_t.resize(V * H);
  for (int64_t v = 0; v < V; ++v)
    for (int64_t h = 0; h < H; ++h) head.w_t[h * V + v] = head.w[v * H + h];
  // The layer inputs: the twins' forward from x0.
  std::vector<std::vector<float>> xs(L + 1);
  xs[0] = f32(f, c + ".x0");
  for (int64_t l = 0; l < L; ++l) {
    E2eLayer& e = layers[l];
    for (int i = 0; i < 4; ++i) e2e_fill_deq(*e.group(i), pool);
    QatLayer q = e2e_twin(mc, rope, kv, e);
    QatSaved s;
    xs[l + 1].resize(T * H);
    qat_forward(ctx, q, xs[l].data(), T, xs[l + 1].data(), s);
    const std::vector<float> y_ref = f32(f, c + ".layers." + std::to_string(l) + ".y");
    double d = 0;
    for (int64_t i = 0; i < T * H; ++i) d = std::max(d, static_cast<double>(std::fabs(xs[l + 1][i] - y_ref[i])));
    EXPECT_LE(d / max_abs(y_ref), kYTol) << c << " " << isa << " layer " << l << " output";
    std::printf("[ measured ] %s %s layer %lld output rel %.3g\n", c.c_str(), isa.c_str(), static_cast<long long>(l),
                d / max_abs(y_ref));
  }
  std::vector<const float*> xp;
  for (int64_t l = 0; l < L; ++l) xp.push_back(xs[l].data());
  const std::vector<float> zt = f32(f, c + ".teacher_logits");
  int64_t agree = 0;
  const double loss = e2e_window_grads(ctx, mc, rope, kv, head, layers, xp, xs[L].data(), zt.data(), T, &agree);
  const double loss_ref = f.tensor(c + ".loss").ptr<double>()[0];
  EXPECT_LE(std::fabs(loss - loss_ref) / loss_ref, kLossTol) << c << " " << isa << " KL " << loss << " vs " << loss_ref;
  EXPECT_GE(agree, 0);
  EXPECT_LE(agree, T);
  for (int64_t l = 0; l < L; ++l)
    for (int i = 0; i < 4; ++i) {
      StudentGroup& g = *layers[l].group(i);
      EXPECT_TRUE(g.deq.empty() && g.grad.empty()) << "the backward keeps no per-layer buffers";
      ASSERT_EQ(layers[l].scale_grad[i].size(), g.parts.size());
      for (size_t pi = 0; pi < g.parts.size(); ++pi) {
        const std::string name = c + ".layers." + std::to_string(l) + "." + g.parts[pi].module + ".scales_grad";
        const std::vector<float> ref = f32(f, name);
        const std::vector<float>& got = layers[l].scale_grad[i][pi];
        ASSERT_EQ(got.size(), ref.size()) << name;
        double d = 0;
        for (size_t j = 0; j < ref.size(); ++j) d = std::max(d, static_cast<double>(std::fabs(got[j] - ref[j])));
        const double rel = d / max_abs(ref);
        EXPECT_LE(rel, kGradTol) << isa << " " << name;
        EXPECT_GT(max_abs(ref), 0) << name;
        std::printf("[ measured ] %s %s rel %.3g\n", isa.c_str(), name.c_str(), rel);
      }
    }
  std::printf("[ measured ] %s %s KL %.6g vs %.6g (rel %.3g)\n", c.c_str(), isa.c_str(), loss, loss_ref,
              std::fabs(loss - loss_ref) / loss_ref);
}

INSTANTIATE_TEST_SUITE_P(Cases, PtqrE2eGolden,
                         ::testing::Combine(::testing::Values("qwen2", "qwen3"), ::testing::ValuesIn(available_isas())));

}  // namespace
}  // namespace blockspec
