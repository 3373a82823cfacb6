#include "ptqr/qat_layer.h"

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/quant.h"
#include "train/gemm.h"
#include "train/grad_ops.h"

namespace blockspec {

namespace {

// y [T, N] = a [T, K] @ deq^T + bias
void group_forward(const OpContext& ctx, const StudentGroup& g, const float* a, int64_t T, float* y) {
  gemm_nt(ctx, a, g.deq.data(), T, g.K, g.N, y);
  if (!g.bias.empty())
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < g.N; ++n) y[t * g.N + n] += g.bias[n];
}

// K / V rows [T * nkv, hd] as the cache stores and attention reads them.
void kv_round(KvDType dt, const float* x, int64_t rows, int64_t hd, float* out) {
  std::vector<uint8_t> codes(hd * kv_code_bytes(dt));
  std::vector<float> sc(std::max<int64_t>(1, kv_scales_per_row(dt, hd)));
  for (int64_t r = 0; r < rows; ++r) {
    kv_quantize_row(dt, x + r * hd, hd, 1.0f, codes.data(), sc.data());
    kv_dequantize_row(dt, codes.data(), sc.data(), hd, out + r * hd);
  }
}

}  // namespace

void qat_forward(const OpContext& ctx, const QatLayer& l, const float* x, int64_t T, float* y, QatSaved& s) {
  const ModelConfig& c = *l.c;
  if (c.attn_output_gate || c.is_hybrid()) fail("ptqr: only dense decoder layers train (Qwen2 / Qwen3 / Llama)");
  if (l.kv == KvDType::kFP8E4M3) fail("ptqr: the fp8_e4m3 KV cache needs calibrated layer scales; not supported");
  const int64_t H = c.hidden_size, hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads, I = c.intermediate_size;
  const int64_t wq = nh * hd, wk = nkv * hd, wr = wq + 2 * wk;
  const float eps = static_cast<float>(c.rms_norm_eps);
  s.T = T;
  s.x.assign(x, x + T * H);
  // A linear's input as the serving kernels see it: rounded per token to int8 (W8A8) or f32 as it is.
  auto acts = [&](const float* in, int64_t M, int64_t K, float* out) {
    if (l.act_int8) round_acts_token(ctx, in, M, K, out);
    else std::copy_n(in, M * K, out);
  };
  // ---- attention ----
  std::vector<float> xn(T * H), qkv(T * wr);
  rmsnorm(x, l.attn_norm, eps, T, H, xn.data());
  s.a1.resize(T * H);
  acts(xn.data(), T, H, s.a1.data());
  group_forward(ctx, *l.qkv, s.a1.data(), T, qkv.data());
  s.q_pre.resize(T * wq), s.k_pre.resize(T * wk);
  std::vector<float> v(T * wk);
  for (int64_t t = 0; t < T; ++t) {
    std::copy_n(qkv.data() + t * wr, wq, s.q_pre.data() + t * wq);
    std::copy_n(qkv.data() + t * wr + wq, wk, s.k_pre.data() + t * wk);
    std::copy_n(qkv.data() + t * wr + wq + wk, wk, v.data() + t * wk);
  }
  s.qr = s.q_pre;
  std::vector<float> kr = s.k_pre;
  if (l.q_norm) {
    rmsnorm(s.qr.data(), l.q_norm, eps, T * nh, hd, s.qr.data());
    rmsnorm(kr.data(), l.k_norm, eps, T * nkv, hd, kr.data());
  }
  std::vector<int64_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = t;
  const RopeTables& rp = *l.rope;
  rope_neox(s.qr.data(), pos.data(), T, nh, hd, rp.inv_freq.data(), rp.rotary_dim, rp.attention_scaling);
  rope_neox(kr.data(), pos.data(), T, nkv, hd, rp.inv_freq.data(), rp.rotary_dim, rp.attention_scaling);
  s.kq.resize(T * wk), s.vq.resize(T * wk);
  kv_round(l.kv, kr.data(), T * nkv, hd, s.kq.data());
  kv_round(l.kv, v.data(), T * nkv, hd, s.vq.data());
  s.att.resize(T * wq);
  causal_attention_forward(ctx, s.qr.data(), s.kq.data(), s.vq.data(), T, nh, nkv, hd,
                           1.0f / std::sqrt(static_cast<float>(hd)), s.att.data(), s.probs);
  s.a2.resize(T * wq);
  acts(s.att.data(), T, wq, s.a2.data());
  std::vector<float> tmp(T * H);
  group_forward(ctx, *l.o, s.a2.data(), T, tmp.data());
  s.x2.resize(T * H);
  for (int64_t i = 0; i < T * H; ++i) s.x2[i] = x[i] + tmp[i];
  // ---- MLP ----
  rmsnorm(s.x2.data(), l.ffn_norm, eps, T, H, xn.data());
  s.a3.resize(T * H);
  acts(xn.data(), T, H, s.a3.data());
  s.gu.resize(T * 2 * I);
  group_forward(ctx, *l.gu, s.a3.data(), T, s.gu.data());
  std::vector<float> h(T * I);
  swiglu_rows(ctx, s.gu.data(), T, I, h.data());
  s.a4.resize(T * I);
  acts(h.data(), T, I, s.a4.data());
  group_forward(ctx, *l.down, s.a4.data(), T, tmp.data());
  for (int64_t i = 0; i < T * H; ++i) y[i] = s.x2[i] + tmp[i];
}

namespace {
// g.bias_grad[n] += sum over rows of d[t, n]   (d: [T, g.N])
void add_bias_grad(StudentGroup& g, const float* d, int64_t T) {
  if (g.bias_grad.empty()) return;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < g.N; ++n) g.bias_grad[n] += d[t * g.N + n];
}
}  // namespace

void qat_backward(const OpContext& ctx, const QatLayer& l, const QatSaved& s, const float* dy, float* dx) {
  const ModelConfig& c = *l.c;
  const int64_t T = s.T, H = c.hidden_size, hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads, I = c.intermediate_size;
  const int64_t wq = nh * hd, wk = nkv * hd, wr = wq + 2 * wk;
  const float eps = static_cast<float>(c.rms_norm_eps);
  // ---- MLP ----  y = x2 + down(rnd(swiglu(gu(rnd(norm(x2))))))
  std::vector<float> dh(T * I), dgu(T * 2 * I), da(T * H), dx2(dy, dy + T * H), dn(T * H);
  gemm_backward(ctx, s.a4.data(), l.down->deq.data(), nullptr, dy, T, I, H, dh.data(), l.down->grad.data());
  add_bias_grad(*l.down, dy, T);
  swiglu_backward(s.gu.data(), dh.data(), T, I, dgu.data());
  gemm_backward(ctx, s.a3.data(), l.gu->deq.data(), nullptr, dgu.data(), T, H, 2 * I, da.data(), l.gu->grad.data());
  add_bias_grad(*l.gu, dgu.data(), T);
  rmsnorm_backward(s.x2.data(), l.ffn_norm, eps, da.data(), T, H, dn.data(), l.ffn_norm_grad);
  for (int64_t i = 0; i < T * H; ++i) dx2[i] += dn[i];
  // ---- attention ----  x2 = x + o(rnd(attn(rope(q), kv(rope(k)), kv(v))))
  std::vector<float> datt(T * wq), dq(T * wq), dk(T * wk), dv(T * wk);
  gemm_backward(ctx, s.a2.data(), l.o->deq.data(), nullptr, dx2.data(), T, wq, H, datt.data(), l.o->grad.data());
  add_bias_grad(*l.o, dx2.data(), T);
  causal_attention_backward(ctx, s.qr.data(), s.kq.data(), s.vq.data(), s.att.data(), s.probs, datt.data(), T, nh, nkv,
                            hd, 1.0f / std::sqrt(static_cast<float>(hd)), dq.data(), dk.data(), dv.data());
  std::vector<int64_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = t;
  const RopeTables& rp = *l.rope;
  rope_neox_backward(dq.data(), pos.data(), T, nh, hd, rp.inv_freq.data(), rp.rotary_dim, rp.attention_scaling);
  rope_neox_backward(dk.data(), pos.data(), T, nkv, hd, rp.inv_freq.data(), rp.rotary_dim, rp.attention_scaling);
  if (l.q_norm) {
    std::vector<float> g(T * wq);
    rmsnorm_backward(s.q_pre.data(), l.q_norm, eps, dq.data(), T * nh, hd, g.data(), nullptr);
    dq.swap(g);
    g.resize(T * wk);
    rmsnorm_backward(s.k_pre.data(), l.k_norm, eps, dk.data(), T * nkv, hd, g.data(), nullptr);
    dk.swap(g);
  }
  std::vector<float> dqkv(T * wr);
  for (int64_t t = 0; t < T; ++t) {
    std::copy_n(dq.data() + t * wq, wq, dqkv.data() + t * wr);
    std::copy_n(dk.data() + t * wk, wk, dqkv.data() + t * wr + wq);
    std::copy_n(dv.data() + t * wk, wk, dqkv.data() + t * wr + wq + wk);
  }
  const bool need_da = dx != nullptr || l.attn_norm_grad != nullptr;
  gemm_backward(ctx, s.a1.data(), l.qkv->deq.data(), nullptr, dqkv.data(), T, H, wr, need_da ? da.data() : nullptr,
                l.qkv->grad.data());
  add_bias_grad(*l.qkv, dqkv.data(), T);
  if (!need_da) return;
  rmsnorm_backward(s.x.data(), l.attn_norm, eps, da.data(), T, H, dn.data(), l.attn_norm_grad);
  if (!dx) return;
  for (int64_t i = 0; i < T * H; ++i) dx[i] = dx2[i] + dn[i];
}

}  // namespace blockspec
