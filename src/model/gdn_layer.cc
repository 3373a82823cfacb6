#include "model/gdn_layer.h"

#include <cmath>

#include "kernels/gdn.h"
#include "kernels/quant.h"

namespace blockspec {

namespace {

// Offsets of one layer's log for n tokens (gdn_layer.h).
struct LogLayout {
  int64_t S, conv, m, qk, v, alpha, beta, end;
  LogLayout(const ModelConfig& c, int64_t n) {
    const GdnConfig& g = c.gdn;
    S = 0;
    conv = S + g.n_value_heads * g.key_head_dim * g.value_head_dim;
    m = conv + g.conv_state_floats();
    qk = m + n * g.conv_dim();
    v = qk + n * 2 * g.key_dim();
    alpha = v + n * g.value_dim();
    beta = alpha + n * g.n_value_heads;
    end = beta + n * g.n_value_heads;
  }
};

// The recurrence heads of one sequence: q, k rows [n, 2 KD] (q heads then k
// heads), v rows at stride v_stride, gates [n, n_v], outputs [n, VD].
void push_heads(const ModelConfig& c, const float* qk, const float* v, int64_t v_stride, const float* alpha,
                const float* beta, float* o, float* S, int64_t n, std::vector<GdnHead>& heads) {
  const GdnConfig& g = c.gdn;
  const int64_t KD = g.key_dim(), VD = g.value_dim(), nv = g.n_value_heads, dk = g.key_head_dim, dv = g.value_head_dim;
  const int64_t rep = nv / g.n_key_heads;  // v-head h reads k-head h / rep (HF repeat_interleave)
  for (int64_t h = 0; h < nv; ++h)
    heads.push_back(GdnHead{qk + (h / rep) * dk, qk + KD + (h / rep) * dk, v + h * dv, alpha + h, beta + h, o + h * dv,
                            S + h * dk * dv, n, dk, dv, 2 * KD, v_stride, VD, nv});
}

}  // namespace

int64_t gdn_log_floats(const ModelConfig& c, int64_t n) { return LogLayout(c, n).end; }

void gdn_rollback(const OpContext& ctx, const ModelConfig& c, const float* log, int64_t n, int64_t keep, float* state) {
  const GdnConfig& g = c.gdn;
  const LogLayout L(c, n);
  const int64_t C = g.conv_dim(), K = g.conv_kernel;
  float* S = state + g.conv_state_floats();
  std::copy(log + L.S, log + L.conv, S);
  // Conv rows: the last K-1 of (old rows ++ the kept tokens' pre-conv rows).
  std::vector<float> rows((K - 1 + keep) * C);
  std::copy(log + L.conv, log + L.m, rows.begin());
  std::copy(log + L.m, log + L.m + keep * C, rows.begin() + (K - 1) * C);
  std::copy(rows.end() - (K - 1) * C, rows.end(), state);
  std::vector<float> o(keep * g.value_dim());
  std::vector<GdnHead> heads;
  push_heads(c, log + L.qk, log + L.v, g.value_dim(), log + L.alpha, log + L.beta, o.data(), S, keep, heads);
  gdn_recurrent_heads(ctx, heads);
}

void gdn_layer(const OpContext& ctx, const ModelConfig& c, const LayerWeights& l, const std::vector<GdnSeq>& seqs,
               float* x, LayerScratch& s, const LayerObserver* observer, bool chunked) {
  const GdnConfig& g = c.gdn;
  const int64_t H = c.hidden_size, C = g.conv_dim(), KD = g.key_dim(), VD = g.value_dim();
  const int64_t nk = g.n_key_heads, nv = g.n_value_heads, dk = g.key_head_dim, dv = g.value_head_dim;
  const int64_t P = C + VD + 2 * nv;  // projection row: qkv | z | b | a
  const float eps = static_cast<float>(c.rms_norm_eps);
  int64_t n = 0;
  for (const GdnSeq& q : seqs) n += q.n;
  s.xn.resize(n * H), s.proj.resize(n * P), s.conv.resize(n * C), s.qk.resize(n * 2 * KD), s.z.resize(n * VD);
  s.alpha.resize(n * nv), s.beta.resize(n * nv), s.o.resize(n * VD), s.tmp.resize(n * H), s.g.resize(n * nv);
  rmsnorm(x, l.attn_norm.ptr<float>(), eps, n, H, s.xn.data());
  if (observer) (*observer)(LayerTap::kAttnIn, s.xn.data(), n, H);
  linear_group(ctx, s.xn.data(), l.gdn.in, s.proj.data(), n, s.scratch);
  // A verify's log: the state before, and the pre-conv rows (gdn_rollback).
  int64_t row = 0;
  for (const GdnSeq& q : seqs) {
    if (q.log != nullptr) {
      const LogLayout L(c, q.n);
      const float* S = q.state + g.conv_state_floats();
      std::copy(S, S + (L.conv - L.S), q.log + L.S);
      std::copy(q.state, q.state + g.conv_state_floats(), q.log + L.conv);
      for (int64_t t = 0; t < q.n; ++t) {
        const float* m = s.proj.data() + (row + t) * P;
        std::copy(m, m + C, q.log + L.m + t * C);
      }
    }
    row += q.n;
  }
  // Conv + SiLU per sequence, from (and into) its carried conv rows.
  row = 0;
  for (const GdnSeq& q : seqs) {
    gdn_conv_silu(ctx, s.proj.data() + row * P, q.n, P, l.gdn.conv.ptr<float>(), g.conv_kernel, C, q.state,
                  s.conv.data() + row * C);
    row += q.n;
  }
  // q, k: l2-normalised per key head (HF l2norm, eps 1e-6), q then divided by
  // sqrt(d_k) as torch_recurrent_gated_delta_rule does; gates in f32.
  const float qdiv = static_cast<float>(std::sqrt(static_cast<double>(dk)));
  const float* neg_a = l.gdn.neg_a.ptr<float>();
  const float* dt = l.gdn.dt_bias.ptr<float>();
  for (int64_t t = 0; t < n; ++t) {
    const float* u = s.conv.data() + t * C;
    float* qk = s.qk.data() + t * 2 * KD;
    for (int64_t hh = 0; hh < 2 * nk; ++hh) {  // q heads, then k heads
      const float* in = u + hh * dk;
      float ss = 0.f;
      for (int64_t i = 0; i < dk; ++i) ss += in[i] * in[i];
      const float inv = 1.0f / std::sqrt(ss + 1e-6f);
      float* out = qk + hh * dk;
      for (int64_t i = 0; i < dk; ++i) out[i] = hh < nk ? in[i] * inv / qdiv : in[i] * inv;
    }
    const float* pr = s.proj.data() + t * P;
    std::copy(pr + C, pr + C + VD, s.z.data() + t * VD);
    for (int64_t h = 0; h < nv; ++h) {
      const float b = pr[C + VD + h], a = pr[C + VD + nv + h] + dt[h];
      s.beta[t * nv + h] = 1.0f / (1.0f + std::exp(-b));
      const float sp = a > 20.f ? a : std::log1p(std::exp(a));  // softplus, torch's threshold 20
      s.g[t * nv + h] = neg_a[h] * sp;
      s.alpha[t * nv + h] = std::exp(s.g[t * nv + h]);
    }
  }
  // The recurrence, every (sequence, value head) an independent item.
  std::vector<GdnHead> heads;
  heads.reserve(seqs.size() * nv);
  row = 0;
  for (const GdnSeq& q : seqs) {
    if (q.log != nullptr) {  // the recurrence's inputs, for gdn_rollback
      const LogLayout L(c, q.n);
      std::copy(s.qk.data() + row * 2 * KD, s.qk.data() + (row + q.n) * 2 * KD, q.log + L.qk);
      for (int64_t t = 0; t < q.n; ++t) {
        const float* v = s.conv.data() + (row + t) * C + 2 * KD;
        std::copy(v, v + VD, q.log + L.v + t * VD);
      }
      std::copy(s.alpha.data() + row * nv, s.alpha.data() + (row + q.n) * nv, q.log + L.alpha);
      std::copy(s.beta.data() + row * nv, s.beta.data() + (row + q.n) * nv, q.log + L.beta);
    }
    const size_t first = heads.size();
    push_heads(c, s.qk.data() + row * 2 * KD, s.conv.data() + row * C + 2 * KD, C, s.alpha.data() + row * nv,
               s.beta.data() + row * nv, s.o.data() + row * VD, q.state + g.conv_state_floats(), q.n, heads);
    if (chunked && q.log == nullptr && q.n >= 16)  // a prefill chunk: the chunked form (reads g)
      for (size_t i = first; i < heads.size(); ++i) heads[i].g = s.g.data() + row * nv + (i - first);
    row += q.n;
  }
  gdn_recurrent_heads(ctx, heads);
  // Gated RMSNorm per head (norm before gate): w * rmsnorm(o) * silu(z).
  rmsnorm(s.o.data(), l.gdn.norm.ptr<float>(), eps, n * nv, dv, s.o.data());
  ctx.k->swiglu(s.z.data(), s.o.data(), s.o.data(), n * VD, false);
  if (observer) (*observer)(LayerTap::kOIn, s.o.data(), n, VD);
  linear(ctx, s.o.data(), l.gdn.out, nullptr, s.tmp.data(), n);
  for (int64_t i = 0; i < n * H; ++i) x[i] += s.tmp[i];
  mlp_block(ctx, c, l, n, x, s, false, observer);
}

}  // namespace blockspec
