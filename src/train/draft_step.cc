#include "train/draft_step.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "model/hf_names.h"
#include "train/blocks.h"
#include "train/gemm.h"
#include "train/grad_ops.h"
#include "train/selector_loss.h"
#include "train/span_attention.h"

namespace blockspec {

namespace {

void matmul(const OpContext& c, const float* x, const std::vector<float>& w, int64_t M, int64_t K, int64_t N,
            float* y) {
  if (static_cast<int64_t>(w.size()) != N * K) fail("draft_step: weight of ", w.size(), " values, expected ", N * K);
  gemm_nt(c, x, w.data(), M, K, N, y);
}

void add_to(std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
}

// Saved activations of one layer.
struct LayerActs {
  std::vector<float> x, a, q, kb, kc, vb, vc, qr, K, V, att, probs, x1, m, gu, sw;  // q, kb, kc: before q/k norm
  // DFlash2: the sublayers' normed inputs and raw outputs before their convolutions, and the dynamic kernels.
  std::vector<float> ua, dyn_a, o, um, dyn_m, d;
  // What the quantized linears multiply: a, att, m, sw themselves, or (DraftShape::act_int8) their int8
  // rounding in the *q buffers.
  std::vector<float> aq, attq, mq, swq;
  const float *a_in = nullptr, *att_in = nullptr, *m_in = nullptr, *sw_in = nullptr;
};

// The D-PACE loss of a row (training.md §3): each slot's cross-entropy under the mask (row.weight), the
// detached weights dpace_weights makes from them, L = sum_i w_i CE_i / denom, and dlogits_i = w_i / denom *
// (softmax(z_i) - onehot(label_i)) where wanted (may alias logits).
double dpace_cross_entropy(const OpContext& c, const DraftRow& row, int64_t Nq, int64_t V, const float* logits,
                           float* dlogits, uint8_t* correct) {
  std::vector<double> ce(Nq);
  cross_entropy_rows(c, logits, row.labels.data(), row.weight.data(), Nq, V, 1.0, dlogits, correct, ce.data());
  const std::vector<float> w = dpace_weights(std::vector<float>(ce.begin(), ce.end()), row.weight, row.B,
                                             row.dpace_alpha);
  double loss = 0;
  for (int64_t i = 0; i < Nq; ++i) loss += w[i] * ce[i];
  if (dlogits != nullptr)
    c.pool->parallel_for(Nq, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const float f = static_cast<float>(w[i] / row.denom);
        for (int64_t v = 0; v < V; ++v) dlogits[i * V + v] *= f;
      }
    });
  return loss / row.denom;
}

}  // namespace

DraftParams DraftParams::zeros(const DraftShape& s) {
  DraftParams p;
  const int64_t H = s.H, nq = s.n_heads * s.head_dim, nk = s.n_kv_heads * s.head_dim;
  p.fc.assign(H * s.tap_width, 0.f);
  p.hidden_norm.assign(H, 0.f);
  p.norm.assign(H, 0.f);
  p.layers.resize(s.n_layers);
  for (Layer& l : p.layers) {
    l.attn_norm.assign(H, 0.f), l.ffn_norm.assign(H, 0.f);
    l.q.assign(nq * H, 0.f), l.k.assign(nk * H, 0.f), l.v.assign(nk * H, 0.f), l.o.assign(H * nq, 0.f);
    l.q_norm.assign(s.head_dim, 0.f), l.k_norm.assign(s.head_dim, 0.f);
    l.gate_up.assign(2 * s.F * H, 0.f), l.down.assign(H * s.F, 0.f);
    if (s.dflash2()) {
      const int64_t kt = s.conv_kernel, G = H / s.conv_group;
      l.attn_conv_base.assign(2 * kt * H, 0.f), l.mlp_conv_base.assign(2 * kt * H, 0.f);
      l.attn_conv_proj.assign(2 * kt * G * H, 0.f), l.mlp_conv_proj.assign(2 * kt * G * H, 0.f);
    }
  }
  if (s.dflash2()) {
    p.hidden_projection.assign(s.selector_rank * H, 0.f);
    p.predecessor.assign(s.V * s.selector_rank, 0.f), p.successor.assign(s.V * s.selector_rank, 0.f);
  }
  return p;
}

DraftParams DraftParams::init(const DraftShape& s, uint64_t seed, float init_std) {
  DraftParams p = zeros(s);
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.f, init_std), d02(0.f, 0.02f);
  auto has = [](const std::string& name, const char* part) { return name.find(part) != std::string::npos; };
  p.each([&](const std::string& name, std::vector<float>& t) {
    if (has(name, "base_kernel")) {  // [2 side, kt, H]: tap 0 passes the input through
      for (size_t i = 0; i < t.size(); ++i) t[i] = (i / s.H) % s.conv_kernel == 0 ? 1.f : 0.f;
    } else if (has(name, "kernel_projection") || has(name, "successor_codebook")) {
      std::fill(t.begin(), t.end(), 0.f);
    } else if (has(name, "predecessor_codebook") || has(name, "hidden_projection")) {
      for (float& x : t) x = d02(g);
    } else {
      const bool norm = has(name, "norm");
      for (float& x : t) x = norm ? 1.f : d(g);
    }
  });
  return p;
}

void DraftParams::each(const std::function<void(const std::string&, std::vector<float>&)>& f) {
  f("fc.weight", fc);
  f("hidden_norm.weight", hidden_norm);
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string p = hf::draft_layer(static_cast<int64_t>(i));
    Layer& l = layers[i];
    f(hf::weight(p, hf::kAttnNorm), l.attn_norm);
    f(hf::weight(p, hf::kQ), l.q);
    f(hf::weight(p, hf::kK), l.k);
    f(hf::weight(p, hf::kV), l.v);
    f(hf::weight(p, hf::kO), l.o);
    f(hf::weight(p, hf::kQNorm), l.q_norm);
    f(hf::weight(p, hf::kKNorm), l.k_norm);
    f(hf::weight(p, hf::kFfnNorm), l.ffn_norm);
    f(p + "mlp.gate_up_proj.weight", l.gate_up);  // split into gate_proj / up_proj when written
    f(hf::weight(p, hf::kDown), l.down);
    if (!l.attn_conv_base.empty()) {
      f(p + "attention_conv.base_kernel", l.attn_conv_base);
      f(p + "attention_conv.kernel_projection.weight", l.attn_conv_proj);
      f(p + "mlp_conv.base_kernel", l.mlp_conv_base);
      f(p + "mlp_conv.kernel_projection.weight", l.mlp_conv_proj);
    }
  }
  f("norm.weight", norm);
  if (!hidden_projection.empty()) {
    f("candidate_selector.hidden_projection.weight", hidden_projection);
    f("candidate_selector.predecessor_codebook", predecessor);
    f("candidate_selector.successor_codebook", successor);
  }
}

DraftStepResult draft_step(const DraftShape& s, const DraftParams& p, const FrozenTarget& t, const DraftRow& row,
                           DraftParams* grad_out, const OpContext& ctx) {
  const int64_t H = s.H, D = s.head_dim, nh = s.n_heads, nkv = s.n_kv_heads, nq = nh * D, nk = nkv * D, F = s.F;
  const int64_t S = row.S, Nq = static_cast<int64_t>(row.block_ids.size()), NK = S + Nq;
  if (row.B < 1 || Nq != static_cast<int64_t>(row.anchors.size()) * row.B)
    fail("draft_step: block ids must be n_anchors x block_size");
  std::vector<int64_t> pos_b(Nq);
  for (int64_t i = 0; i < Nq; ++i) pos_b[i] = row.pos.at(row.anchors[i / row.B]) + i % row.B;
  const MaskedAttentionShape as{Nq, NK, nh, nkv, D, 1.0f / std::sqrt(static_cast<float>(D))};
  if (!row.layer_spans.empty() && static_cast<int64_t>(row.layer_spans.size()) != s.n_layers)
    fail("draft_step: ", row.layer_spans.size(), " per-layer span sets for ", s.n_layers, " layers");
  auto spans_of = [&](int64_t li) { return row.layer_spans.empty() ? row.spans.data() : row.layer_spans[li].data(); };
  auto rope_fwd = [&](std::vector<float>& x, const int64_t* pos, int64_t n, int64_t heads) {
    rope_neox(x.data(), pos, n, heads, D, s.rope.inv_freq.data(), s.rope.rotary_dim, s.rope.attention_scaling);
  };
  auto rope_bwd = [&](std::vector<float>& x, const int64_t* pos, int64_t n, int64_t heads) {
    rope_neox_backward(x.data(), pos, n, heads, D, s.rope.inv_freq.data(), s.rope.rotary_dim, s.rope.attention_scaling);
  };

  // DFlash2 convolutions of every block's B rows (never across blocks), and their backward.
  const bool d2 = s.dflash2();
  if (row.dpace_alpha > 0 && (d2 || row.teacher_logits != nullptr))
    fail("draft_step: D-PACE weights need DFlash's cross-entropy (not DFlash2, not distillation)");
  if (row.dpace_alpha > 1) fail("draft_step: D-PACE alpha must be in (0, 1], found ", row.dpace_alpha);
  const int64_t kt = s.conv_kernel, gs = s.conv_group, dw = d2 ? 2 * kt * (H / gs) : 0, nA = Nq / row.B;
  auto conv = [&](const float* src, const std::vector<float>& base, int64_t side, const float* dyn, float* dst) {
    for (int64_t j = 0; j < nA; ++j)
      grouped_dynamic_conv(src + j * row.B * H, row.B, H, base.data() + side * kt * H, dyn + j * row.B * dw, side, kt,
                           gs, dst + j * row.B * H);
  };
  // dsrc and ddyn are added to.
  auto conv_bwd = [&](const float* src, const std::vector<float>& base, int64_t side, const float* dyn,
                      const float* dout, float* dsrc, std::vector<float>& dbase, float* ddyn) {
    for (int64_t j = 0; j < nA; ++j)
      grouped_dynamic_conv_backward(src + j * row.B * H, row.B, H, base.data() + side * kt * H, dyn + j * row.B * dw,
                                    side, kt, gs, dout + j * row.B * H, dsrc + j * row.B * H,
                                    dbase.data() + side * kt * H, ddyn + j * row.B * dw);
  };

  // The conv before a sublayer: out = conv(u, side 0, dyn = u proj^T). dio
  // holds d loss / d out and becomes d loss / d u; ddyn holds side 1's part.
  auto conv_in_backward = [&](const std::vector<float>& u, const std::vector<float>& base,
                              const std::vector<float>& proj, const std::vector<float>& dyn, std::vector<float>& ddyn,
                              std::vector<float>& dbase, std::vector<float>& dproj, std::vector<float>& dio) {
    std::vector<float> du(Nq * H, 0.f), tmp(Nq * H);
    conv_bwd(u.data(), base, 0, dyn.data(), dio.data(), du.data(), dbase, ddyn.data());
    gemm_backward(ctx, u.data(), proj.data(), nullptr, ddyn.data(), Nq, H, dw, tmp.data(), dproj.data());
    add_to(du, tmp);
    dio = std::move(du);
  };

  // The input a quantized linear multiplies for x [M, K]: x, or its per-token int8 rounding in buf.
  auto lin_in = [&](const float* x, int64_t M, int64_t K, std::vector<float>& buf) -> const float* {
    if (!s.act_int8) return x;
    buf.resize(M * K);
    round_acts_token(ctx, x, M, K, buf.data());
    return buf.data();
  };
  if (row.teacher_logits != nullptr && d2) fail("draft_step: distilling a DFlash2 drafter is not supported");

  // ---- forward ----
  std::vector<float> c_pre(S * H), c(S * H), taps_q, cq;
  const float* taps_in = lin_in(row.taps, S, s.tap_width, taps_q);
  matmul(ctx, taps_in, p.fc, S, s.tap_width, H, c_pre.data());
  rmsnorm(c_pre.data(), p.hidden_norm.data(), s.eps, S, H, c.data());
  std::vector<float> x(Nq * H);
  t.embed(row.block_ids.data(), Nq, x.data());
  std::vector<LayerActs> acts(s.n_layers);
  const float* c_in = lin_in(c.data(), S, H, cq);  // what every layer's context K/V projections multiply
  for (int64_t li = 0; li < s.n_layers; ++li) {
    const DraftParams::Layer& l = p.layers[li];
    LayerActs& A = acts[li];
    A.x = x;
    A.a.resize(Nq * H);
    rmsnorm(x.data(), l.attn_norm.data(), s.eps, Nq, H, A.a.data());
    if (d2) {  // a = conv(rmsnorm(x)), side 0, kernels predicted from rmsnorm(x)
      A.ua = A.a, A.dyn_a.resize(Nq * dw);
      matmul(ctx, A.ua.data(), l.attn_conv_proj, Nq, H, dw, A.dyn_a.data());
      conv(A.ua.data(), l.attn_conv_base, 0, A.dyn_a.data(), A.a.data());
    }
    A.q.resize(Nq * nq), A.kb.resize(Nq * nk), A.vb.resize(Nq * nk), A.kc.resize(S * nk), A.vc.resize(S * nk);
    A.a_in = lin_in(A.a.data(), Nq, H, A.aq);
    matmul(ctx, A.a_in, l.q, Nq, H, nq, A.q.data());
    matmul(ctx, A.a_in, l.k, Nq, H, nk, A.kb.data());
    matmul(ctx, A.a_in, l.v, Nq, H, nk, A.vb.data());
    matmul(ctx, c_in, l.k, S, H, nk, A.kc.data());  // context K/V: no input norm (dflash.md §2)
    matmul(ctx, c_in, l.v, S, H, nk, A.vc.data());
    std::vector<float> qr(A.q.size()), kbr(A.kb.size()), kcr(A.kc.size());
    rmsnorm(A.q.data(), l.q_norm.data(), s.eps, Nq * nh, D, qr.data());
    rmsnorm(A.kb.data(), l.k_norm.data(), s.eps, Nq * nkv, D, kbr.data());
    rmsnorm(A.kc.data(), l.k_norm.data(), s.eps, S * nkv, D, kcr.data());
    rope_fwd(qr, pos_b.data(), Nq, nh);
    rope_fwd(kbr, pos_b.data(), Nq, nkv);
    rope_fwd(kcr, row.pos.data(), S, nkv);
    A.K = kcr;
    A.K.insert(A.K.end(), kbr.begin(), kbr.end());
    A.V = A.vc;
    A.V.insert(A.V.end(), A.vb.begin(), A.vb.end());
    A.qr = std::move(qr);  // the normed, roped q the attention used
    A.att.resize(Nq * nq);
    span_attention_forward(ctx, A.qr.data(), A.K.data(), A.V.data(), spans_of(li), as, A.att.data(), A.probs);
    std::vector<float> o(Nq * H);
    A.att_in = lin_in(A.att.data(), Nq, nq, A.attq);
    matmul(ctx, A.att_in, l.o, Nq, nq, H, o.data());
    if (d2) A.o = o, conv(A.o.data(), l.attn_conv_base, 1, A.dyn_a.data(), o.data());
    for (int64_t i = 0; i < Nq * H; ++i) x[i] += o[i];
    A.x1 = x;
    A.m.resize(Nq * H), A.gu.resize(Nq * 2 * F), A.sw.resize(Nq * F);
    rmsnorm(x.data(), l.ffn_norm.data(), s.eps, Nq, H, A.m.data());
    if (d2) {
      A.um = A.m, A.dyn_m.resize(Nq * dw);
      matmul(ctx, A.um.data(), l.mlp_conv_proj, Nq, H, dw, A.dyn_m.data());
      conv(A.um.data(), l.mlp_conv_base, 0, A.dyn_m.data(), A.m.data());
    }
    A.m_in = lin_in(A.m.data(), Nq, H, A.mq);
    matmul(ctx, A.m_in, l.gate_up, Nq, H, 2 * F, A.gu.data());
    for (int64_t r = 0; r < Nq; ++r)
      for (int64_t i = 0; i < F; ++i) {
        const double g = A.gu[r * 2 * F + i];
        A.sw[r * F + i] = static_cast<float>(g / (1 + std::exp(-g)) * A.gu[r * 2 * F + F + i]);
      }
    std::vector<float> d(Nq * H);
    A.sw_in = lin_in(A.sw.data(), Nq, F, A.swq);
    matmul(ctx, A.sw_in, l.down, Nq, F, H, d.data());
    if (d2) A.d = d, conv(A.d.data(), l.mlp_conv_base, 1, A.dyn_m.data(), d.data());
    for (int64_t i = 0; i < Nq * H; ++i) x[i] += d[i];
  }
  std::vector<float> h(Nq * H), logits(Nq * s.V);
  rmsnorm(x.data(), p.norm.data(), s.eps, Nq, H, h.data());
  if (t.lm_head_bf16 != nullptr) gemm_nt_bf16(ctx, h.data(), t.lm_head_bf16, Nq, H, s.V, logits.data());
  else gemm_nt(ctx, h.data(), t.lm_head, Nq, H, s.V, logits.data());  // the frozen head, read in place
  DraftStepResult res;
  res.correct.resize(Nq);
  // DFlash2's selector reads the logits before the cross-entropy overwrites them.
  const int64_t rk = s.selector_rank;
  std::vector<float> gsel(d2 ? Nq * rk : 0), dgsel(grad_out != nullptr ? gsel.size() : 0);
  SelectorResult sel;
  if (d2) {
    if (static_cast<int64_t>(row.prev_ids.size()) != Nq) fail("draft_step: DFlash2 needs a predecessor id per slot");
    matmul(ctx, h.data(), p.hidden_projection, Nq, H, rk, gsel.data());
    sel = selector_loss(logits.data(), gsel.data(), row.prev_ids.data(), row.labels.data(), row.weight.data(),
                        row.denom, s.selector_alpha, p.predecessor.data(), p.successor.data(),
                        SelectorShape{Nq, s.V, rk, s.selector_top_k}, grad_out ? dgsel.data() : nullptr,
                        grad_out ? grad_out->predecessor.data() : nullptr,
                        grad_out ? grad_out->successor.data() : nullptr, *ctx.pool);
    res.selector_loss = sel.loss;
  }
  // Training: dlogits overwrite the logits (the largest buffer of the step).
  std::vector<float>& dlogits = logits;
  if (row.dpace_alpha > 0) {
    res.unary_loss = dpace_cross_entropy(ctx, row, Nq, s.V, logits.data(), grad_out ? dlogits.data() : nullptr,
                                         res.correct.data());
  } else {
    res.unary_loss =
        row.teacher_logits != nullptr
            ? kl_rows(ctx, logits.data(), row.teacher_logits, row.labels.data(), row.weight.data(), Nq, s.V,
                      row.denom, grad_out ? dlogits.data() : nullptr, res.correct.data())
            : cross_entropy_rows(ctx, logits.data(), row.labels.data(), row.weight.data(), Nq, s.V, row.denom,
                                 grad_out ? dlogits.data() : nullptr, res.correct.data());
  }
  res.loss = res.unary_loss + res.selector_loss;
  if (d2) res.correct = sel.correct;  // serving drafts the selector's pick
  if (grad_out == nullptr) {  // loss, what serving drafts, and the logits
    res.logits = std::move(logits);
    return res;
  }
  DraftParams& grad = *grad_out;

  // ---- backward ----
  for (int64_t i = 0; d2 && i < Nq; ++i)  // the selector's gradient on the unary logits of its candidates
    for (int64_t k = 0; k < s.selector_top_k; ++k)
      dlogits[i * s.V + sel.cand[i * s.selector_top_k + k]] += sel.dscore[i * s.selector_top_k + k];
  std::vector<float> dh(Nq * H), dx(Nq * H), dc(S * H, 0.f);
  if (t.lm_head_t_bf16 != nullptr) gemm_nt_bf16(ctx, dlogits.data(), t.lm_head_t_bf16, Nq, s.V, H, dh.data());
  else gemm_backward(ctx, h.data(), t.lm_head, t.lm_head_t, dlogits.data(), Nq, H, s.V, dh.data(), nullptr);  // frozen head
  if (d2) {  // g = hidden_projection(h)
    std::vector<float> dhs(Nq * H);
    gemm_backward(ctx, h.data(), p.hidden_projection.data(), nullptr, dgsel.data(), Nq, H, rk, dhs.data(),
                  grad.hidden_projection.data());
    add_to(dh, dhs);
  }
  rmsnorm_backward(x.data(), p.norm.data(), s.eps, dh.data(), Nq, H, dx.data(), grad.norm.data());
  for (int64_t li = s.n_layers - 1; li >= 0; --li) {
    const DraftParams::Layer& l = p.layers[li];
    DraftParams::Layer& gl = grad.layers[li];
    LayerActs& A = acts[li];
    // MLP: x2 = x1 + down(swiglu(gate_up(rmsnorm(x1))))
    std::vector<float> dsw(Nq * F), dgu(Nq * 2 * F), dm(Nq * H), dx1(Nq * H), ddyn, dd;
    const float* ddown = dx.data();  // d loss / d down(...)
    if (d2) {  // through the conv after the MLP
      ddyn.assign(Nq * dw, 0.f), dd.assign(Nq * H, 0.f);
      conv_bwd(A.d.data(), l.mlp_conv_base, 1, A.dyn_m.data(), dx.data(), dd.data(), gl.mlp_conv_base, ddyn.data());
      ddown = dd.data();
    }
    gemm_backward(ctx, A.sw_in, l.down.data(), nullptr, ddown, Nq, F, H, dsw.data(), gl.down.data());
    swiglu_backward(A.gu.data(), dsw.data(), Nq, F, dgu.data());
    gemm_backward(ctx, A.m_in, l.gate_up.data(), nullptr, dgu.data(), Nq, H, 2 * F, dm.data(), gl.gate_up.data());
    if (d2) conv_in_backward(A.um, l.mlp_conv_base, l.mlp_conv_proj, A.dyn_m, ddyn, gl.mlp_conv_base, gl.mlp_conv_proj, dm);
    rmsnorm_backward(A.x1.data(), l.ffn_norm.data(), s.eps, dm.data(), Nq, H, dx1.data(), gl.ffn_norm.data());
    add_to(dx1, dx);  // residual
    // attention: x1 = x + o(att)
    std::vector<float> datt(Nq * nq), dq(Nq * nq), dK(NK * nk), dV(NK * nk), dout;
    const float* dattn = dx1.data();  // d loss / d o(att)
    if (d2) {  // through the conv after the attention
      ddyn.assign(Nq * dw, 0.f), dout.assign(Nq * H, 0.f);
      conv_bwd(A.o.data(), l.attn_conv_base, 1, A.dyn_a.data(), dx1.data(), dout.data(), gl.attn_conv_base,
               ddyn.data());
      dattn = dout.data();
    }
    gemm_backward(ctx, A.att_in, l.o.data(), nullptr, dattn, Nq, nq, H, datt.data(), gl.o.data());
    span_attention_backward(ctx, A.qr.data(), A.K.data(), A.V.data(), spans_of(li), as, A.probs, datt.data(), dq.data(),
                            dK.data(), dV.data());
    std::vector<float> dkc(dK.begin(), dK.begin() + S * nk), dkb(dK.begin() + S * nk, dK.end());
    std::vector<float> dvc(dV.begin(), dV.begin() + S * nk), dvb(dV.begin() + S * nk, dV.end());
    rope_bwd(dq, pos_b.data(), Nq, nh);
    rope_bwd(dkb, pos_b.data(), Nq, nkv);
    rope_bwd(dkc, row.pos.data(), S, nkv);
    // per-head q / k RMSNorms (k_norm serves block and context keys)
    std::vector<float> dq0(Nq * nq), dkb0(Nq * nk), dkc0(S * nk);
    rmsnorm_backward(A.q.data(), l.q_norm.data(), s.eps, dq.data(), Nq * nh, D, dq0.data(), gl.q_norm.data());
    rmsnorm_backward(A.kb.data(), l.k_norm.data(), s.eps, dkb.data(), Nq * nkv, D, dkb0.data(), gl.k_norm.data());
    rmsnorm_backward(A.kc.data(), l.k_norm.data(), s.eps, dkc.data(), S * nkv, D, dkc0.data(), gl.k_norm.data());
    // projections of the block rows (from a) and of the context (from c)
    std::vector<float> da(Nq * H), tmp(Nq * H), dct(S * H);
    gemm_backward(ctx, A.a_in, l.q.data(), nullptr, dq0.data(), Nq, H, nq, da.data(), gl.q.data());
    gemm_backward(ctx, A.a_in, l.k.data(), nullptr, dkb0.data(), Nq, H, nk, tmp.data(), gl.k.data());
    add_to(da, tmp);
    gemm_backward(ctx, A.a_in, l.v.data(), nullptr, dvb.data(), Nq, H, nk, tmp.data(), gl.v.data());
    add_to(da, tmp);
    gemm_backward(ctx, c_in, l.k.data(), nullptr, dkc0.data(), S, H, nk, dct.data(), gl.k.data());
    add_to(dc, dct);
    gemm_backward(ctx, c_in, l.v.data(), nullptr, dvc.data(), S, H, nk, dct.data(), gl.v.data());
    add_to(dc, dct);
    if (d2) conv_in_backward(A.ua, l.attn_conv_base, l.attn_conv_proj, A.dyn_a, ddyn, gl.attn_conv_base, gl.attn_conv_proj, da);
    rmsnorm_backward(A.x.data(), l.attn_norm.data(), s.eps, da.data(), Nq, H, dx.data(), gl.attn_norm.data());
    add_to(dx, dx1);  // residual; dx is now the gradient of this layer's input
  }
  // dx reaches the frozen embedding and stops. Context: c = hidden_norm(fc(taps)).
  std::vector<float> dcpre(S * H);
  rmsnorm_backward(c_pre.data(), p.hidden_norm.data(), s.eps, dc.data(), S, H, dcpre.data(), grad.hidden_norm.data());
  gemm_backward(ctx, taps_in, p.fc.data(), nullptr, dcpre.data(), S, s.tap_width, H, nullptr, grad.fc.data());
  return res;
}

}  // namespace blockspec
