#include "model/decoder_layer.h"

#include <algorithm>
#include <cmath>

#include "kernels/kv_attention.h"
#include "kernels/quant.h"

namespace blockspec {

namespace {
const float* opt_ptr(const Tensor& t) { return t.empty() ? nullptr : t.ptr<float>(); }
}  // namespace

void decoder_layer(const OpContext& ctx, const ModelConfig& c, const RopeTables& rope, const LayerWeights& l,
                   int64_t cache_layer, const std::vector<LayerSeq>& seqs, const int64_t* pos, float* x,
                   LayerScratch& s, bool bf16, const LayerObserver* observer) {
  const int64_t H = c.hidden_size, hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads, I = c.intermediate_size;
  const int64_t wq = nh * hd, wk = nkv * hd;
  const int64_t wqg = c.attn_output_gate ? 2 * wq : wq;  // q_proj rows: query (and gate) per head
  const int64_t wr = wqg + 2 * wk;
  int64_t n = 0;
  for (const LayerSeq& q : seqs) n += q.n;
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto rnd = [bf16](std::vector<float>& v) {
    if (bf16) round_to_bf16(v.data(), static_cast<int64_t>(v.size()));
  };
  auto see = [&](LayerTap t, const std::vector<float>& rows, int64_t cols) {
    if (observer) (*observer)(t, rows.data(), n, cols);
  };
  s.xn.resize(n * H), s.q.resize(n * wq), s.kn.resize(n * wk), s.vn.resize(n * wk), s.att.resize(n * wq);
  s.tmp.resize(n * H), s.gate.resize(n * I), s.qkv.resize(n * wr), s.gu.resize(n * 2 * I);
  if (c.attn_output_gate) s.gate.resize(std::max(n * I, n * wq));
  // ---- attention ----
  rmsnorm(x, l.attn_norm.ptr<float>(), eps, n, H, s.xn.data(), bf16);
  see(LayerTap::kAttnIn, s.xn, H);
  linear_group(ctx, s.xn.data(), l.attn_qkv, s.qkv.data(), n, s.scratch);
  for (int64_t t = 0; t < n; ++t) {
    const float* r = s.qkv.data() + t * wr;
    if (c.attn_output_gate) {  // per head h: rows [2 h hd, 2 h hd + hd) query, the next hd its gate
      for (int64_t h = 0; h < nh; ++h) {
        std::copy(r + 2 * h * hd, r + 2 * h * hd + hd, s.q.data() + t * wq + h * hd);
        std::copy(r + 2 * h * hd + hd, r + 2 * (h + 1) * hd, s.gate.data() + t * wq + h * hd);
      }
    } else {
      std::copy(r, r + wq, s.q.data() + t * wq);
    }
    std::copy(r + wqg, r + wqg + wk, s.kn.data() + t * wk);
    std::copy(r + wqg + wk, r + wr, s.vn.data() + t * wk);
  }
  rnd(s.q), rnd(s.kn), rnd(s.vn);
  if (c.arch == Arch::kQwen3 || c.arch == Arch::kQwen35) {  // per-head RMSNorm of q and k before RoPE
    rmsnorm(s.q.data(), l.attn_q_norm.ptr<float>(), eps, n * nh, hd, s.q.data(), bf16);
    rmsnorm(s.kn.data(), l.attn_k_norm.ptr<float>(), eps, n * nkv, hd, s.kn.data(), bf16);
  }
  rope_neox(s.q.data(), pos, n, nh, hd, rope.inv_freq.data(), rope.rotary_dim, rope.attention_scaling, bf16);
  rope_neox(s.kn.data(), pos, n, nkv, hd, rope.inv_freq.data(), rope.rotary_dim, rope.attention_scaling, bf16);
  see(LayerTap::kKeys, s.kn, wk);
  see(LayerTap::kValues, s.vn, wk);
  std::vector<KvAttentionJob> jobs;  // one per sequence, run in one parallel pass
  int64_t row = 0;
  for (const LayerSeq& q : seqs) {
    const int64_t start = q.cache->size();
    AttentionShape as{q.n, start, nh, nkv, hd, 1.0f / std::sqrt(static_cast<float>(hd)), bf16};
    // Every dtype (f32 too) and paged caches: rows written once here, read in
    // place by attention through the cache's page table.
    q.cache->write(cache_layer, start, q.n, s.kn.data() + row * wk, s.vn.data() + row * wk);
    jobs.push_back({s.q.data() + row * wq, q.cache->k_view(cache_layer), q.cache->v_view(cache_layer), as,
                    s.att.data() + row * wq});
    row += q.n;
  }
  attention_causal_kv_batch(ctx, jobs);
  if (c.attn_output_gate)  // HF: attn_output * torch.sigmoid(gate)
    for (int64_t i = 0; i < n * wq; ++i) s.att[i] *= 1.0f / (1.0f + std::exp(-s.gate[i]));
  see(LayerTap::kOIn, s.att, wq);
  linear(ctx, s.att.data(), l.attn_o, opt_ptr(l.attn_o_bias), s.tmp.data(), n);
  rnd(s.tmp);
  for (int64_t i = 0; i < n * H; ++i) x[i] += s.tmp[i];
  if (bf16) round_to_bf16(x, n * H);
  mlp_block(ctx, c, l, n, x, s, bf16, observer);
}

void mlp_block(const OpContext& ctx, const ModelConfig& c, const LayerWeights& l, int64_t n, float* x, LayerScratch& s,
               bool bf16, const LayerObserver* observer) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto rnd = [bf16](std::vector<float>& v) {
    if (bf16) round_to_bf16(v.data(), static_cast<int64_t>(v.size()));
  };
  auto see = [&](LayerTap t, const std::vector<float>& rows, int64_t cols) {
    if (observer) (*observer)(t, rows.data(), n, cols);
  };
  s.xn.resize(n * H), s.tmp.resize(n * H), s.gu.resize(n * 2 * I);
  s.gate.resize(std::max<size_t>(s.gate.size(), n * I));
  // ---- MLP (SwiGLU) ----
  rmsnorm(x, l.ffn_norm.ptr<float>(), eps, n, H, s.xn.data(), bf16);
  see(LayerTap::kMlpIn, s.xn, H);
  linear_group(ctx, s.xn.data(), l.ffn_gate_up, s.gu.data(), n, s.scratch);
  rnd(s.gu);
  swiglu_rows(ctx, s.gu.data(), n, I, s.gate.data(), bf16);
  see(LayerTap::kDownIn, s.gate, I);
  linear(ctx, s.gate.data(), l.ffn_down, opt_ptr(l.ffn_down_bias), s.tmp.data(), n);
  rnd(s.tmp);
  for (int64_t i = 0; i < n * H; ++i) x[i] += s.tmp[i];
  if (bf16) round_to_bf16(x, n * H);
}

}  // namespace blockspec
