#include "formats/gguf_qwen35.h"

#include <cmath>
#include <vector>

#include "base/error.h"

namespace blockspec {

namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

int64_t positive(const GgufFile& f, const std::string& key) {
  const auto v = f.find_int(key);
  if (!v) fail(f.path(), ": missing metadata key \"", key, "\"");
  if (*v <= 0) fail(f.path(), ": metadata key \"", key, "\" = ", *v, ", expected > 0");
  return *v;
}

// HF value-head index h = g r + j  <-  GGUF index j n_k + g.
int64_t gguf_head(int64_t h, int64_t nk, int64_t r) { return (h % r) * nk + h / r; }

// out[HF rows] from in[GGUF rows] for `n_heads` heads of `head` rows of `row` floats each, starting at row0.
void untile_rows(const float* in, float* out, int64_t row0, int64_t nk, int64_t r, int64_t head, int64_t row) {
  for (int64_t h = 0; h < nk * r; ++h) {
    const float* src = in + (row0 + gguf_head(h, nk, r) * head) * row;
    std::copy(src, src + head * row, out + (row0 + h * head) * row);
  }
}

}  // namespace

void qwen35_config_from_gguf(const GgufFile& f, ModelConfig& c) {
  const std::string a = "qwen35";
  c.arch = Arch::kQwen35;
  c.model_type = "qwen3_5_text";
  c.architecture = "Qwen3_5ForCausalLM";
  GdnConfig& g = c.gdn;
  g.conv_kernel = positive(f, a + ".ssm.conv_kernel");
  g.key_head_dim = positive(f, a + ".ssm.state_size");
  g.n_key_heads = positive(f, a + ".ssm.group_count");
  g.n_value_heads = positive(f, a + ".ssm.time_step_rank");
  const int64_t inner = positive(f, a + ".ssm.inner_size");
  if (inner % g.n_value_heads != 0 || g.n_value_heads % g.n_key_heads != 0)
    fail(f.path(), ": ", a, ".ssm.inner_size ", inner, " / time_step_rank ", g.n_value_heads, " / group_count ",
         g.n_key_heads, " do not divide");
  g.value_head_dim = inner / g.n_value_heads;
  if (f.has(a + ".attention.recurrent_layers"))
    fail(f.path(), ": ", a, ".attention.recurrent_layers is not supported yet (only full_attention_interval)");
  const int64_t every = positive(f, a + ".full_attention_interval");
  c.linear_layers.assign(c.n_layers, false);
  for (int64_t i = 0; i < c.n_layers; ++i) c.linear_layers[i] = (i + 1) % every != 0;
  c.attn_output_gate = c.offset_norms = true;
  // Shapes the metadata implies (GGUF ne: [K, N]).
  auto expect = [&](const std::string& name, std::vector<int64_t> ne) {
    if (!f.has_tensor(name)) fail(f.path(), ": tensor \"", name, "\" missing for a qwen35 model");
    if (f.tensor_info(name).ne != ne)
      fail(f.path(), ": tensor \"", name, "\" has ne ", shape_str(Shape(f.tensor_info(name).ne.begin(), f.tensor_info(name).ne.end())),
           ", expected ", shape_str(Shape(ne.begin(), ne.end())), " from the metadata");
  };
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    if (c.linear_layers[i]) {
      expect(p + "attn_qkv.weight", {c.hidden_size, g.conv_dim()});
      expect(p + "ssm_conv1d.weight", {g.conv_kernel, g.conv_dim()});
      expect(p + "ssm_a", {g.n_value_heads});
    } else {
      expect(p + "attn_q.weight", {c.hidden_size, 2 * c.n_heads * c.head_dim});
      expect(p + "attn_k.weight", {c.hidden_size, c.n_kv_heads * c.head_dim});
    }
  }
}

std::optional<std::string> qwen35_hf_name(const std::string& layer, const std::string& rest) {
  static constexpr std::pair<const char*, const char*> kMap[] = {
      {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight"}, {"attn_gate.weight", "linear_attn.in_proj_z.weight"},
      {"ssm_beta.weight", "linear_attn.in_proj_b.weight"},   {"ssm_alpha.weight", "linear_attn.in_proj_a.weight"},
      {"ssm_conv1d.weight", "linear_attn.conv1d.weight"},    {"ssm_dt.bias", "linear_attn.dt_bias"},
      {"ssm_a", "linear_attn.A_log"},                        {"ssm_norm.weight", "linear_attn.norm.weight"},
      {"ssm_out.weight", "linear_attn.out_proj.weight"},     {"post_attention_norm.weight", "post_attention_layernorm.weight"},
  };
  for (const auto& [from, to] : kMap)
    if (rest == from) return "model.layers." + layer + "." + to;
  return std::nullopt;
}

Shape qwen35_hf_shape(const std::string& hf_name, const Shape& shape) {
  if (ends_with(hf_name, "linear_attn.conv1d.weight") && shape.size() == 2) return Shape{shape[0], 1, shape[1]};
  return shape;
}

bool qwen35_transformed(const ModelConfig& c, const std::string& n) {
  const bool offset_norm = ends_with(n, "norm.weight") && !ends_with(n, "linear_attn.norm.weight");
  const bool vheads = c.gdn.n_value_heads != c.gdn.n_key_heads && n.find("linear_attn.") != std::string::npos &&
                      !ends_with(n, "linear_attn.norm.weight");
  return offset_norm || vheads || ends_with(n, "linear_attn.A_log") || ends_with(n, "linear_attn.conv1d.weight");
}

Tensor qwen35_to_hf(const ModelConfig& c, const std::string& n, Tensor t) {
  if (!qwen35_transformed(c, n)) return t;
  t = to_f32(t);  // an owned copy to edit
  float* v = t.mutable_ptr<float>();
  const int64_t numel = t.numel();
  if (ends_with(n, "norm.weight") && !ends_with(n, "linear_attn.norm.weight")) {
    for (int64_t i = 0; i < numel; ++i) v[i] -= 1.0f;  // exact for w + 1 in [0.5, 2] (Sterbenz)
    return t;
  }
  if (ends_with(n, "linear_attn.A_log"))
    for (int64_t i = 0; i < numel; ++i) {
      if (!(v[i] < 0.f)) fail(n, ": ssm_a must be negative (-exp(A_log)), found ", v[i]);
      v[i] = std::log(-v[i]);
    }
  const GdnConfig& g = c.gdn;
  const int64_t nk = g.n_key_heads, r = g.n_value_heads / g.n_key_heads, dv = g.value_head_dim;
  Shape shape = qwen35_hf_shape(n, t.shape());
  if (r > 1) {
    const std::vector<float> in(v, v + numel);
    if (ends_with(n, "in_proj_qkv.weight") || ends_with(n, "conv1d.weight")) {  // rows: q | k | v heads
      const int64_t row = numel / t.dim(0);
      untile_rows(in.data(), v, 2 * g.key_dim(), nk, r, dv, row);
    } else if (ends_with(n, "in_proj_z.weight")) {
      untile_rows(in.data(), v, 0, nk, r, dv, numel / t.dim(0));
    } else if (ends_with(n, "in_proj_a.weight") || ends_with(n, "in_proj_b.weight")) {
      untile_rows(in.data(), v, 0, nk, r, 1, numel / t.dim(0));
    } else if (ends_with(n, "A_log") || ends_with(n, "dt_bias")) {
      untile_rows(in.data(), v, 0, nk, r, 1, 1);
    } else if (ends_with(n, "out_proj.weight")) {  // columns of [H, value_dim]
      const int64_t rows = t.dim(0), cols = t.dim(1);
      for (int64_t i = 0; i < rows; ++i) untile_rows(in.data() + i * cols, v + i * cols, 0, nk, r, dv, 1);
    }
  }
  if (shape != t.shape()) {
    Tensor out(DType::kF32, shape);
    std::copy(v, v + numel, out.mutable_ptr<float>());
    return out;
  }
  return t;
}

}  // namespace blockspec
