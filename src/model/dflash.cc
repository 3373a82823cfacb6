// Drafter forward pass (dflash.md §2.1-2.3, §5.1). All activations f32.
#include "model/dflash.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "kernels/quant.h"
#include "kernels/quant_rows.h"

namespace blockspec {

namespace {

// DFlash2 grouped dynamic depthwise convolution over the block slots
// (ZL-new _grouped_dynamic_convolve): out[t, c] = sum_{j < kt}
// (base[j, c] + dyn[t, j, c / gs]) * u[t - j, c], u[t - j] = 0 before slot 0,
// so taps never cross the block boundary.
//   u, out: [n, H]  base: [kt, H] (one side)  dyn: [n, 2, kt, G] (side picked by `side`)
void grouped_conv(const float* u, int64_t n, int64_t H, const float* base, const float* dyn, int64_t side,
                  int64_t kt, int64_t gs, float* out) {
  const int64_t G = H / gs;
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * H;
    std::fill(o, o + H, 0.f);
    for (int64_t j = 0; j < kt && j <= t; ++j) {
      const float* src = u + (t - j) * H;
      const float* d = dyn + t * 2 * kt * G + (side * kt + j) * G;
      const float* bj = base + j * H;
      for (int64_t c = 0; c < H; ++c) o[c] += bj[c] * src[c] + d[c / gs] * src[c];
    }
  }
}

}  // namespace

void DraftModel::forward(DraftCache& cache, const float* feats, int64_t n_ctx, int32_t anchor, int64_t k,
                         std::vector<float>& hidden) {
  const ModelConfig& b = cfg_.base;
  const int64_t H = b.hidden_size, hd = b.head_dim, nh = b.n_heads, nkv = b.n_kv_heads;
  const int64_t nq = nh * hd, nk = nkv * hd, wr = nq + 2 * nk, F = b.intermediate_size;
  const int64_t nb = k + 1, m = n_ctx, P0 = cache.size(), P = P0 + m;
  const bool d2 = cfg_.method == DraftMethod::kDFlash2;
  const int64_t kt = cfg_.conv_kernel_size, gs = cfg_.conv_group_size, G = d2 ? H / gs : 0;
  if (k < 0) fail("draft: negative block length");
  if (P > cache.capacity())
    fail("draft: context length ", P, " exceeds the drafter cache capacity ", cache.capacity());
  OpContext ctx = target_.op_context();
  const float eps = static_cast<float>(b.rms_norm_eps);
  std::vector<float> scratch;

  // Context vectors c_j = hidden_norm(fc f_j): [m, H].
  std::vector<float> c(m * H);
  if (m > 0) {
    if (observer_) observer_({"fc"}, feats, m, cfg_.n_taps() * target_.config().hidden_size);
    linear(ctx, feats, w_.fc, nullptr, c.data(), m);
    rmsnorm(c.data(), w_.hidden_norm.ptr<float>(), eps, m, H, c.data());
  }
  // Block input: target embedding rows of [anchor, MASK x k] x input_embedding_scale.
  std::vector<int32_t> ids(nb, cfg_.mask_token_id);
  ids[0] = anchor;
  std::vector<float> x(nb * H);  // [nb, H] residual stream
  dequantize_rows(target_.weights().tok_embd, ids.data(), nb, x.data());
  if (cfg_.input_embedding_scale != 1.0)
    for (float& v : x) v *= static_cast<float>(cfg_.input_embedding_scale);

  std::vector<int64_t> pos(m + nb);  // [m + nb] ctx positions then block positions
  std::iota(pos.begin(), pos.end(), P0);
  cache.set_size(P);

  std::vector<float> in((m + nb) * H);   // [m + nb, H] qkv input: ctx rows, then block rows
  std::vector<float> qkv((m + nb) * wr);  // [m + nb, wr]
  std::vector<float> q(nb * nq), kb(nb * nk), vb(nb * nk), kc(m * nk), vc(m * nk);
  std::vector<float> att(nb * nq), tmp(nb * H), u(nb * H), dyn(nb * 2 * std::max<int64_t>(kt, 1) * std::max<int64_t>(G, 1));
  std::vector<float> gu(nb * 2 * F), act(nb * F);
  std::vector<const float*> ctx_k, ctx_v;  // [P - first kept] context rows of the layer
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::copy(c.begin(), c.end(), in.begin());

  for (int64_t li = 0; li < b.n_layers; ++li) {
    const DraftLayerWeights& l = w_.layers[li];
    const std::string lp = observer_ ? "layers." + std::to_string(li) + "." : "";
    // ---- attention ----
    float* a = in.data() + m * H;  // block rows of the qkv input
    rmsnorm(x.data(), l.attn_norm.ptr<float>(), eps, nb, H, a);
    if (d2) {  // conv before the sublayer, side 0
      if (observer_) observer_({lp + "attention_conv.kernel_projection"}, a, nb, H);
      linear(ctx, a, l.attn_conv_proj, nullptr, dyn.data(), nb);
      std::copy(a, a + nb * H, u.begin());
      grouped_conv(u.data(), nb, H, l.attn_conv_base.ptr<float>(), dyn.data(), 0, kt, gs, a);
    }
    // One GEMM for the new context rows and the block rows: the weights
    // stream once per draft step.
    if (observer_) {
      observer_({lp + "self_attn.q_proj"}, a, nb, H);
      observer_({lp + "self_attn.k_proj", lp + "self_attn.v_proj"}, in.data(), m + nb, H);
    }
    linear_group(ctx, in.data(), l.qkv, qkv.data(), m + nb, scratch);
    for (int64_t t = 0; t < m; ++t) {
      std::copy(qkv.begin() + t * wr + nq, qkv.begin() + t * wr + nq + nk, kc.begin() + t * nk);
      std::copy(qkv.begin() + t * wr + nq + nk, qkv.begin() + (t + 1) * wr, vc.begin() + t * nk);
    }
    for (int64_t t = 0; t < nb; ++t) {
      const float* r = qkv.data() + (m + t) * wr;
      std::copy(r, r + nq, q.begin() + t * nq);
      std::copy(r + nq, r + nq + nk, kb.begin() + t * nk);
      std::copy(r + nq + nk, r + wr, vb.begin() + t * nk);
    }
    rmsnorm(q.data(), l.q_norm.ptr<float>(), eps, nb * nh, hd, q.data());
    rmsnorm(kb.data(), l.k_norm.ptr<float>(), eps, nb * nkv, hd, kb.data());
    rope_neox(q.data(), pos.data() + m, nb, nh, hd, rope_.inv_freq.data(), rope_.rotary_dim, rope_.attention_scaling);
    rope_neox(kb.data(), pos.data() + m, nb, nkv, hd, rope_.inv_freq.data(), rope_.rotary_dim,
              rope_.attention_scaling);
    if (m > 0) {  // context K/V: k_norm + RoPE on K, V raw; stored once
      rmsnorm(kc.data(), l.k_norm.ptr<float>(), eps, m * nkv, hd, kc.data());
      rope_neox(kc.data(), pos.data(), m, nkv, hd, rope_.inv_freq.data(), rope_.rotary_dim, rope_.attention_scaling);
      for (int64_t t = 0; t < m; ++t) {  // on a ring, later rows overwrite earlier ones: the last W stay
        std::copy(kc.begin() + t * nk, kc.begin() + (t + 1) * nk, cache.k_row(li, P0 + t));
        std::copy(vc.begin() + t * nk, vc.begin() + (t + 1) * nk, cache.v_row(li, P0 + t));
      }
    }
    // Visibility (§2.3, kernels/ops.h attention_block): query slot i at P+i
    // sees context pk <= P-1 with P+i - pk < W on sliding layers, and block
    // slot j when the layer is bidirectional or j <= i (|i - j| < W on
    // sliding layers). Context rows live in the drafter's (ring) cache.
    const int64_t lo_kept = cache.first_kept(li);
    ctx_k.resize(P - lo_kept), ctx_v.resize(P - lo_kept);
    for (int64_t pk = lo_kept; pk < P; ++pk) {
      ctx_k[pk - lo_kept] = cache.k_row(li, pk);
      ctx_v[pk - lo_kept] = cache.v_row(li, pk);
    }
    const BlockAttentionShape shape{nb, P, lo_kept, nh, nkv, hd, scale, static_cast<bool>(cfg_.layer_causal[li]),
                                    cfg_.layer_window[li]};
    attention_block(ctx, q.data(), ctx_k.data(), ctx_v.data(), kb.data(), vb.data(), shape, att.data());
    if (observer_) observer_({lp + "self_attn.o_proj"}, att.data(), nb, nq);
    linear(ctx, att.data(), l.o, l.o_bias.empty() ? nullptr : l.o_bias.ptr<float>(), tmp.data(), nb);
    if (d2) {  // conv after the sublayer, side 1, with the kernel predicted from its input
      std::copy(tmp.begin(), tmp.end(), u.begin());
      grouped_conv(u.data(), nb, H, l.attn_conv_base.ptr<float>() + kt * H, dyn.data(), 1, kt, gs, tmp.data());
    }
    for (int64_t e = 0; e < nb * H; ++e) x[e] += tmp[e];
    // ---- MLP ----
    rmsnorm(x.data(), l.ffn_norm.ptr<float>(), eps, nb, H, a);
    if (d2) {
      if (observer_) observer_({lp + "mlp_conv.kernel_projection"}, a, nb, H);
      linear(ctx, a, l.mlp_conv_proj, nullptr, dyn.data(), nb);
      std::copy(a, a + nb * H, u.begin());
      grouped_conv(u.data(), nb, H, l.mlp_conv_base.ptr<float>(), dyn.data(), 0, kt, gs, a);
    }
    if (observer_) observer_({lp + "mlp.gate_proj", lp + "mlp.up_proj"}, a, nb, H);
    linear_group(ctx, a, l.gate_up, gu.data(), nb, scratch);
    swiglu_rows(ctx, gu.data(), nb, F, act.data());
    if (observer_) observer_({lp + "mlp.down_proj"}, act.data(), nb, F);
    linear(ctx, act.data(), l.down, nullptr, tmp.data(), nb);
    if (d2) {
      std::copy(tmp.begin(), tmp.end(), u.begin());
      grouped_conv(u.data(), nb, H, l.mlp_conv_base.ptr<float>() + kt * H, dyn.data(), 1, kt, gs, tmp.data());
    }
    for (int64_t e = 0; e < nb * H; ++e) x[e] += tmp[e];
  }
  hidden.resize(nb * H);
  rmsnorm(x.data(), w_.norm.ptr<float>(), eps, nb, H, hidden.data());
}

void DraftModel::logits(const float* hidden, int64_t n, std::vector<float>& out) {
  const int64_t V = target_.config().vocab_size;
  out.resize(n * V);
  OpContext ctx = target_.op_context();
  linear(ctx, hidden, target_.weights().lm_head, nullptr, out.data(), n);
  const float mult = static_cast<float>(cfg_.output_multiplier);
  const float cap = static_cast<float>(cfg_.final_logit_softcapping);
  if (mult != 1.0f)
    for (float& z : out) z *= mult;
  if (cap > 0)
    for (float& z : out) z = cap * std::tanh(z / cap);
}

void DraftModel::select(const float* hidden, const float* logits, int64_t k, int32_t anchor, float temperature,
                        const std::vector<double>& u, Selection& out) {
  if (cfg_.method != DraftMethod::kDFlash2) fail("select: the drafter has no candidate selector");
  const int64_t V = target_.config().vocab_size, C = cfg_.selector_top_k, r = cfg_.selector_rank;
  if (temperature > 0 && static_cast<int64_t>(u.size()) < k) fail("select: need one uniform per slot");
  out.tokens.assign(k, 0), out.cand.assign(k * C, 0), out.scores.assign(k * C, 0.f);
  out.q.assign(temperature > 0 ? k * C : 0, 0.f);
  std::vector<float> g(k * r);  // [k, r] hidden_projection of each slot
  OpContext ctx = target_.op_context();
  linear(ctx, hidden, w_.hidden_projection, nullptr, g.data(), k);
  std::vector<int32_t> idx(V);
  std::vector<float> pred(r), succ(C * r);
  int32_t prev = anchor;
  for (int64_t t = 0; t < k; ++t) {
    const float* z = logits + t * V;
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + C, idx.end(),
                      [z](int32_t a, int32_t b2) { return z[a] > z[b2] || (z[a] == z[b2] && a < b2); });
    int32_t* cand = out.cand.data() + t * C;
    std::copy(idx.begin(), idx.begin() + C, cand);
    dequantize_rows(w_.predecessor_codebook, &prev, 1, pred.data());
    dequantize_rows(w_.successor_codebook, cand, C, succ.data());
    float* s = out.scores.data() + t * C;
    for (int64_t ci = 0; ci < C; ++ci) {
      float acc = 0;
      for (int64_t e = 0; e < r; ++e) acc += pred[e] * g[t * r + e] * succ[ci * r + e];
      s[ci] = z[cand[ci]] + acc;
    }
    int64_t pick = 0;
    if (temperature <= 0) {
      for (int64_t ci = 1; ci < C; ++ci)
        if (s[ci] > s[pick]) pick = ci;
    } else {  // q_t = softmax(S_t / T): plain temperature, no top-k/top-p (dflash.md §5.1b)
      float* q = out.q.data() + t * C;
      float mx = -INFINITY;
      for (int64_t ci = 0; ci < C; ++ci) mx = std::max(mx, s[ci] / temperature);
      double sum = 0;
      for (int64_t ci = 0; ci < C; ++ci) sum += (q[ci] = std::exp(s[ci] / temperature - mx));
      for (int64_t ci = 0; ci < C; ++ci) q[ci] = static_cast<float>(q[ci] / sum);
      double cum = 0;
      pick = C - 1;
      for (int64_t ci = 0; ci < C; ++ci) {
        cum += q[ci];
        if (u[t] < cum) {
          pick = ci;
          break;
        }
      }
    }
    prev = cand[pick];
    out.tokens[t] = prev;
  }
}

}  // namespace blockspec
