// Drafter forward pass (dflash.md §2.1-2.3, §5.1). All activations f32.
#include "model/dflash.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "kernels/quant.h"
#include "kernels/quant_rows.h"
#include "model/hf_names.h"

namespace blockspec {

void DraftModel::forward(DraftCache& cache, const float* feats, int64_t n_ctx, int32_t anchor, int64_t k,
                         std::vector<float>& hidden) {
  forward_batch({DraftJob{&cache, feats, n_ctx, anchor, k, &hidden}});
}

void DraftModel::forward_batch(const std::vector<DraftJob>& jobs) {
  const ModelConfig& b = cfg_.base;
  const int64_t H = b.hidden_size, hd = b.head_dim, nh = b.n_heads, nkv = b.n_kv_heads;
  const int64_t nq = nh * hd, nk = nkv * hd, wr = nq + 2 * nk, F = b.intermediate_size;
  const bool d2 = cfg_.method == DraftMethod::kDFlash2;
  const int64_t kt = cfg_.conv_kernel_size, gs = cfg_.conv_group_size, G = d2 ? H / gs : 0;
  const int64_t TH = cfg_.n_taps() * target_.config().hidden_size;
  const int64_t dyn_w = 2 * std::max<int64_t>(kt, 1) * std::max<int64_t>(G, 1);  // dyn row: [2, kt, G]
  // Rows of all jobs: Mc context rows (job order), then Nb block rows.
  const size_t J = jobs.size();
  std::vector<int64_t> c0(J + 1, 0), b0(J + 1, 0), P(J);  // row offsets; P: block start position
  for (size_t j = 0; j < J; ++j) {
    const DraftJob& jb = jobs[j];
    if (jb.k < -1) fail("draft: negative block length");
    P[j] = jb.cache->size() + jb.n_ctx;
    if (P[j] > jb.cache->capacity())
      fail("draft: context length ", P[j], " exceeds the drafter cache capacity ", jb.cache->capacity());
    c0[j + 1] = c0[j] + jb.n_ctx;
    b0[j + 1] = b0[j] + jb.k + 1;  // k = -1: no block rows
  }
  const int64_t Mc = c0[J], Nb = b0[J];
  OpContext ctx = target_.op_context();
  const float eps = static_cast<float>(b.rms_norm_eps);
  std::vector<float> scratch;

  std::vector<float> in((Mc + Nb) * H);  // [Mc + Nb, H] qkv input: context rows, then block rows
  // Context vectors c_j = hidden_norm(fc f_j): [Mc, H], one GEMM for every job.
  if (Mc > 0) {
    std::vector<float> packed;
    const float* f = jobs[0].feats;
    if (J > 1) {
      packed.resize(Mc * TH);
      for (size_t j = 0; j < J; ++j)
        if (jobs[j].n_ctx > 0) std::copy(jobs[j].feats, jobs[j].feats + jobs[j].n_ctx * TH, packed.begin() + c0[j] * TH);
      f = packed.data();
    }
    if (observer_) observer_({"fc"}, f, Mc, TH);
    linear(ctx, f, w_.fc, nullptr, in.data(), Mc);
    rmsnorm(in.data(), w_.hidden_norm.ptr<float>(), eps, Mc, H, in.data());
  }
  // Block input: target embedding rows of [anchor, MASK x k] x input_embedding_scale.
  std::vector<int32_t> ids(Nb, cfg_.mask_token_id);
  std::vector<int64_t> pos_c(Mc), pos_b(Nb);  // positions of the context and block rows
  for (size_t j = 0; j < J; ++j) {
    if (jobs[j].k >= 0) ids[b0[j]] = jobs[j].anchor;
    std::iota(pos_c.begin() + c0[j], pos_c.begin() + c0[j + 1], jobs[j].cache->size());
    std::iota(pos_b.begin() + b0[j], pos_b.begin() + b0[j + 1], P[j]);
    jobs[j].cache->set_size(P[j]);
  }
  std::vector<float> x(Nb * H);  // [Nb, H] residual stream
  dequantize_rows(target_.weights().tok_embd, ids.data(), Nb, x.data());
  if (cfg_.input_embedding_scale != 1.0)
    for (float& v : x) v *= static_cast<float>(cfg_.input_embedding_scale);

  std::vector<float> qkv((Mc + Nb) * wr);  // [Mc + Nb, wr]
  std::vector<float> q(Nb * nq), kb(Nb * nk), vb(Nb * nk), kc(Mc * nk), vc(Mc * nk);
  std::vector<float> att(Nb * nq), tmp(Nb * H), u(Nb * H), dyn(Nb * dyn_w);
  std::vector<float> gu(Nb * 2 * F), act(Nb * F);
  std::vector<const float*> ctx_k, ctx_v;  // [P - first kept] context rows of one job's layer
  std::vector<float> ctx_deq;               // their dequantized values (a non-f32 cache)
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* a = in.data() + Mc * H;  // block rows of the qkv input
  // DFlash2 convolution of every job's block rows (taps never cross a block):
  // conv(src -> dst) with `base` [kt, H] and side `side` of dyn.
  auto conv = [&](const float* src, const float* base, int64_t side, float* dst) {
    for (size_t j = 0; j < J; ++j)
      if (b0[j + 1] > b0[j])
        grouped_dynamic_conv(src + b0[j] * H, b0[j + 1] - b0[j], H, base, dyn.data() + b0[j] * dyn_w, side, kt, gs,
                   dst + b0[j] * H);
  };

  for (int64_t li = 0; li < b.n_layers; ++li) {
    const DraftLayerWeights& l = w_.layers[li];
    const std::string lp = observer_ ? hf::draft_layer(li) : "";
    // ---- attention ----
    rmsnorm(x.data(), l.attn_norm.ptr<float>(), eps, Nb, H, a);
    if (d2 && Nb > 0) {  // conv before the sublayer, side 0
      if (observer_) observer_({lp + "attention_conv.kernel_projection"}, a, Nb, H);
      linear(ctx, a, l.attn_conv_proj, nullptr, dyn.data(), Nb);
      std::copy(a, a + Nb * H, u.begin());
      conv(u.data(), l.attn_conv_base.ptr<float>(), 0, a);
    }
    // One GEMM for the new context rows and the block rows of every job:
    // the weights stream once per draft step.
    if (observer_) {
      observer_({lp + hf::kQ}, a, Nb, H);
      observer_({lp + hf::kK, lp + hf::kV}, in.data(), Mc + Nb, H);
    }
    linear_group(ctx, in.data(), l.attn_qkv, qkv.data(), Mc + Nb, scratch);
    for (int64_t t = 0; t < Mc; ++t) {
      std::copy(qkv.begin() + t * wr + nq, qkv.begin() + t * wr + nq + nk, kc.begin() + t * nk);
      std::copy(qkv.begin() + t * wr + nq + nk, qkv.begin() + (t + 1) * wr, vc.begin() + t * nk);
    }
    for (int64_t t = 0; t < Nb; ++t) {
      const float* r = qkv.data() + (Mc + t) * wr;
      std::copy(r, r + nq, q.begin() + t * nq);
      std::copy(r + nq, r + nq + nk, kb.begin() + t * nk);
      std::copy(r + nq + nk, r + wr, vb.begin() + t * nk);
    }
    rmsnorm(q.data(), l.attn_q_norm.ptr<float>(), eps, Nb * nh, hd, q.data());
    rmsnorm(kb.data(), l.attn_k_norm.ptr<float>(), eps, Nb * nkv, hd, kb.data());
    rope_neox(q.data(), pos_b.data(), Nb, nh, hd, rope_.inv_freq.data(), rope_.rotary_dim, rope_.attention_scaling);
    rope_neox(kb.data(), pos_b.data(), Nb, nkv, hd, rope_.inv_freq.data(), rope_.rotary_dim, rope_.attention_scaling);
    if (Mc > 0) {  // context K/V: k_norm + RoPE on K, V raw; stored once
      rmsnorm(kc.data(), l.attn_k_norm.ptr<float>(), eps, Mc * nkv, hd, kc.data());
      rope_neox(kc.data(), pos_c.data(), Mc, nkv, hd, rope_.inv_freq.data(), rope_.rotary_dim,
                rope_.attention_scaling);
      for (size_t j = 0; j < J; ++j)
        for (int64_t t = c0[j]; t < c0[j + 1]; ++t) {  // on a ring, later rows overwrite earlier ones: the last W stay
          jobs[j].cache->write(li, pos_c[t], kc.data() + t * nk, vc.data() + t * nk);
        }
    }
    if (Nb == 0) continue;  // context only: no job has a block
    // Visibility (§2.3, kernels/ops.h attention_block): query slot i at P+i
    // sees context pk <= P-1 with P+i - pk < W on sliding layers, and block
    // slot j when the layer is bidirectional or j <= i (|i - j| < W on
    // sliding layers). Context rows live in each job's (ring) cache.
    for (size_t j = 0; j < J; ++j) {
      if (b0[j + 1] == b0[j]) continue;  // no block
      const DraftCache& cache = *jobs[j].cache;
      const int64_t lo_kept = cache.first_kept(li);
      cache.read(li, lo_kept, P[j], ctx_k, ctx_v, ctx_deq);
      const BlockAttentionShape shape{b0[j + 1] - b0[j], P[j], lo_kept, nh, nkv, hd, scale,
                                      static_cast<bool>(cfg_.layer_causal[li]), cfg_.layer_window[li]};
      attention_block(ctx, q.data() + b0[j] * nq, ctx_k.data(), ctx_v.data(), kb.data() + b0[j] * nk,
                      vb.data() + b0[j] * nk, shape, att.data() + b0[j] * nq);
    }
    if (observer_) observer_({lp + hf::kO}, att.data(), Nb, nq);
    linear(ctx, att.data(), l.attn_o, l.attn_o_bias.empty() ? nullptr : l.attn_o_bias.ptr<float>(), tmp.data(), Nb);
    if (d2) {  // conv after the sublayer, side 1, with the kernel predicted from its input
      std::copy(tmp.begin(), tmp.end(), u.begin());
      conv(u.data(), l.attn_conv_base.ptr<float>() + kt * H, 1, tmp.data());
    }
    for (int64_t e = 0; e < Nb * H; ++e) x[e] += tmp[e];
    // ---- MLP ----
    rmsnorm(x.data(), l.ffn_norm.ptr<float>(), eps, Nb, H, a);
    if (d2) {
      if (observer_) observer_({lp + "mlp_conv.kernel_projection"}, a, Nb, H);
      linear(ctx, a, l.mlp_conv_proj, nullptr, dyn.data(), Nb);
      std::copy(a, a + Nb * H, u.begin());
      conv(u.data(), l.mlp_conv_base.ptr<float>(), 0, a);
    }
    if (observer_) observer_({lp + hf::kGate, lp + hf::kUp}, a, Nb, H);
    linear_group(ctx, a, l.ffn_gate_up, gu.data(), Nb, scratch);
    swiglu_rows(ctx, gu.data(), Nb, F, act.data());
    if (observer_) observer_({lp + hf::kDown}, act.data(), Nb, F);
    linear(ctx, act.data(), l.ffn_down, nullptr, tmp.data(), Nb);
    if (d2) {
      std::copy(tmp.begin(), tmp.end(), u.begin());
      conv(u.data(), l.mlp_conv_base.ptr<float>() + kt * H, 1, tmp.data());
    }
    for (int64_t e = 0; e < Nb * H; ++e) x[e] += tmp[e];
  }
  rmsnorm(x.data(), w_.norm.ptr<float>(), eps, Nb, H, x.data());
  for (size_t j = 0; j < J; ++j) jobs[j].hidden->assign(x.begin() + b0[j] * H, x.begin() + b0[j + 1] * H);
}

void DraftModel::logits(const float* hidden, int64_t n, std::vector<float>& out) {
  const int64_t V = target_.config().vocab_size, Vd = cfg_.draft_vocab_size;
  OpContext ctx = target_.op_context();
  std::vector<float>& z = Vd > 0 ? reduced_ : out;  // [n, Vd] or [n, V]
  z.resize(n * (Vd > 0 ? Vd : V));
  linear(ctx, hidden, Vd > 0 ? w_.lm_head : target_.weights().lm_head, nullptr, z.data(), n);
  const float mult = static_cast<float>(cfg_.output_multiplier);
  const float cap = static_cast<float>(cfg_.final_logit_softcapping);
  if (mult != 1.0f)
    for (float& x : z) x *= mult;
  if (cap > 0)
    for (float& x : z) x = cap * std::tanh(x / cap);
  if (Vd > 0) {  // target ids outside the draft vocabulary get probability 0
    out.assign(n * V, -INFINITY);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < Vd; ++i) out[r * V + w_.d2t_ids[i]] = z[r * Vd + i];
  }
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
