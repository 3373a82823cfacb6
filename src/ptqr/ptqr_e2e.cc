// See ptqr_e2e.h.
#include "ptqr/ptqr_e2e.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "base/timer.h"
#include "model/decoder_layer.h"
#include "model/hf_names.h"
#include "ptqr/ptqr_layer.h"
#include "ptqr/qat_layer.h"
#include "quantize/calibration_hybrid.h"
#include "runtime/sampler.h"
#include "train/gemm.h"
#include "train/grad_ops.h"

namespace blockspec {

namespace {

void release(std::vector<float>& v) { std::vector<float>().swap(v); }

// out[part][n * G + g] += sum over the group's k of code[n, k] * grad[n, k].
void add_scale_grads(const StudentGroup& g, std::vector<std::vector<float>>& out, ThreadPool& pool) {
  out.resize(g.parts.size());
  int64_t row0 = 0;
  for (size_t pi = 0; pi < g.parts.size(); ++pi) {
    const QuantWeight& qw = g.parts[pi].qw;
    std::vector<float>& o = out[pi];
    o.resize(qw.N * qw.n_groups, 0.f);
    pool.parallel_for(qw.N, [&](int64_t r0, int64_t r1) {
      for (int64_t n = r0; n < r1; ++n)
        for (int64_t gi = 0; gi < qw.n_groups; ++gi) {
          double s = 0;
          const int64_t k1 = std::min(qw.K, (gi + 1) * qw.group_len);
          for (int64_t k = gi * qw.group_len; k < k1; ++k)
            s += static_cast<double>(qw.q[n * qw.K + k]) * g.grad[(row0 + n) * g.K + k];
          o[n * qw.n_groups + gi] += static_cast<float>(s);
        }
    });
    row0 += qw.N;
  }
}

// The serving forward of layer e over one window x [T, H] at positions 0 .. T - 1, in place.
void serve_layer(const OpContext& ctx, const ModelConfig& c, const RopeTables& rope, KvDType kv, E2eLayer& e,
                 float* x, int64_t T) {
  StudentGroup* groups[4] = {&e.qkv, &e.o, &e.gu, &e.down};
  QuantTensor serving[4];
  for (int i = 0; i < 4; ++i) serving[i] = serving_weight(ctx, *groups[i]);
  LayerWeights lw = layer_linears(ctx, groups, serving);
  lw.attn_norm = f32_view(e.attn_norm), lw.ffn_norm = f32_view(e.ffn_norm);
  lw.attn_q_norm = f32_view(e.q_norm), lw.attn_k_norm = f32_view(e.k_norm);
  run_layer_windows(ctx, c, rope, lw, kv, T, x, T);
}

std::vector<int32_t> argmax_rows(const float* z, int64_t T, int64_t V) {
  std::vector<int32_t> a(T);
  for (int64_t t = 0; t < T; ++t)
    a[t] = static_cast<int32_t>(std::max_element(z + t * V, z + (t + 1) * V) - (z + t * V));
  return a;
}

// The window's KL (and, when dz is given, its gradient) of student logits z against the teacher's zt.
double kl_of(const OpContext& ctx, const float* z, const float* zt, int64_t T, int64_t V, float* dz, int64_t* agree) {
  const std::vector<int32_t> labels = argmax_rows(zt, T, V);
  const std::vector<float> weight(T, 1.f);
  std::vector<uint8_t> correct(T);
  const double kl = kl_rows(ctx, z, zt, labels.data(), weight.data(), T, V, static_cast<double>(T), dz, correct.data());
  if (agree)
    for (uint8_t b : correct) *agree += b;
  return kl;
}

}  // namespace

void e2e_fill_deq(StudentGroup& g, ThreadPool& pool) {
  g.deq.resize(g.N * g.K);
  g.grad.assign(g.N * g.K, 0.f);
  int64_t row0 = 0;
  for (const StudentPart& p : g.parts) {
    pool.parallel_for(p.N, [&](int64_t r0, int64_t r1) {
      for (int64_t n = r0; n < r1; ++n)
        for (int64_t k = 0; k < g.K; ++k)
          g.deq[(row0 + n) * g.K + k] = p.qw.dequantize_code(n, k, p.qw.q[n * g.K + k]);
    });
    row0 += p.N;
  }
}

QatLayer e2e_twin(const ModelConfig& c, const RopeTables& rope, KvDType kv, E2eLayer& e) {
  QatLayer q;
  q.c = &c, q.rope = &rope, q.kv = kv;
  q.attn_norm = e.attn_norm.data(), q.ffn_norm = e.ffn_norm.data();
  q.q_norm = e.q_norm.empty() ? nullptr : e.q_norm.data();
  q.k_norm = e.k_norm.empty() ? nullptr : e.k_norm.data();
  q.qkv = &e.qkv, q.o = &e.o, q.gu = &e.gu, q.down = &e.down;
  q.act_int8 = e.qkv.parts.empty() || ptqr_acts_int8(e.qkv.parts[0].qw.spec);
  return q;
}

void e2e_logits(const OpContext& ctx, const ModelConfig& c, const E2eHead& head, const float* x, int64_t T, float* z) {
  const int64_t H = c.hidden_size;
  std::vector<float> xn(T * H);
  rmsnorm(x, head.norm.data(), static_cast<float>(c.rms_norm_eps), T, H, xn.data());
  gemm_nt(ctx, xn.data(), head.w.data(), T, H, head.V, z);
}

double e2e_window_grads(const OpContext& ctx, const ModelConfig& c, const RopeTables& rope, KvDType kv,
                        const E2eHead& head, std::vector<E2eLayer>& layers, const std::vector<const float*>& xs,
                        const float* x_final, const float* zt, int64_t T, int64_t* agree) {
  const int64_t H = c.hidden_size, V = head.V, L = static_cast<int64_t>(layers.size());
  if (static_cast<int64_t>(xs.size()) != L) fail("ptqr e2e: ", xs.size(), " layer inputs for ", L, " layers");
  const float eps = static_cast<float>(c.rms_norm_eps);
  // ---- head: z = W rmsnorm(x_final), KL against zt ----
  std::vector<float> xn(T * H), z(T * V), dh(T * H), dx(T * H), dxn(T * H), y(T * H);
  rmsnorm(x_final, head.norm.data(), eps, T, H, xn.data());
  gemm_nt(ctx, xn.data(), head.w.data(), T, H, V, z.data());
  const double loss = kl_of(ctx, z.data(), zt, T, V, z.data(), agree);  // z becomes dL/dz
  gemm_backward(ctx, xn.data(), head.w.data(), head.w_t.data(), z.data(), T, H, V, dh.data(), nullptr);
  rmsnorm_backward(x_final, head.norm.data(), eps, dh.data(), T, H, dx.data(), nullptr);
  // ---- layers in reverse, each through its twin on its serving input ----
  for (int64_t l = L - 1; l >= 0; --l) {
    E2eLayer& e = layers[l];
    for (int i = 0; i < 4; ++i) e2e_fill_deq(*e.group(i), *ctx.pool);
    QatLayer q = e2e_twin(c, rope, kv, e);
    QatSaved saved;
    qat_forward(ctx, q, xs[l], T, y.data(), saved);
    qat_backward(ctx, q, saved, dx.data(), l > 0 ? dxn.data() : nullptr);
    for (int i = 0; i < 4; ++i) {
      add_scale_grads(*e.group(i), e.scale_grad[i], *ctx.pool);
      release(e.group(i)->deq);
      release(e.group(i)->grad);
    }
    dx.swap(dxn);
  }
  return loss;
}

PtqrE2eReport run_ptqr_e2e(const OpContext& ctx, const ModelConfig& c, const RopeTables& rope,
                           const WeightSource& teacher, const WeightSource& student,
                           const std::vector<std::vector<int32_t>>& windows, const std::vector<float>& teacher_final,
                           std::map<std::string, QuantWeight>& codes, const PtqrE2eOptions& o,
                           const E2eCheckpoint* resume, const std::function<void(const E2eCheckpoint&)>& save) {
  const Timer total;
  PtqrE2eReport rep;
  const int64_t H = c.hidden_size, V = c.vocab_size, L = c.n_layers, T = o.window;
  const int64_t nw = static_cast<int64_t>(windows.size());
  if (o.steps < 1) fail("--e2e-steps ", o.steps, ": expected >= 1");
  if (!(o.lr > 0)) fail("--e2e-lr ", o.lr, ": expected > 0");
  if (static_cast<int64_t>(teacher_final.size()) != nw * T * H)
    fail("ptqr e2e: the teacher's final stream has ", teacher_final.size(), " values, expected ", nw * T * H);
  for (const auto& w : windows)
    if (static_cast<int64_t>(w.size()) != T) fail("ptqr e2e: a window of ", w.size(), " tokens, expected ", T);
  if (o.holdout < 0 || o.holdout >= nw) fail("ptqr e2e: holdout ", o.holdout, " of ", nw, " windows");
  if (o.holdout > 0 && o.val_every < 1) fail("ptqr e2e: val_every ", o.val_every, ": expected >= 1");
  const int64_t n_train = nw - o.holdout;  // training windows 0 .. n_train - 1, then the held-out ones
  // ---- the frozen head ----
  E2eHead head;
  head.V = V;
  head.norm = load_f32_tensor(teacher, hf::weight("", hf::kFinalNorm));
  const std::string lm = hf::weight("", hf::kLmHead);
  head.w = load_f32_tensor(teacher, c.tie_word_embeddings || !teacher.has(lm) ? hf::weight("", hf::kEmbed) : lm);
  if (static_cast<int64_t>(head.w.size()) != V * H) fail("ptqr e2e: the head has ", head.w.size(), " values, expected ", V * H);
  head.w_t.resize(V * H);
  transpose(ctx, head.w.data(), V, H, head.w_t.data());
  // ---- the student: codes moved in from `codes`, norms and biases from `student` ----
  std::vector<E2eLayer> layers(L);
  for (int64_t l = 0; l < L; ++l) {
    E2eLayer& e = layers[l];
    const std::string p = hf::under(c.weight_prefix, hf::target_layer(l));
    e.attn_norm = load_f32_tensor(student, hf::weight(p, hf::kAttnNorm));
    e.ffn_norm = load_f32_tensor(student, hf::weight(p, hf::kFfnNorm));
    if (c.arch == Arch::kQwen3) {
      e.q_norm = load_f32_tensor(student, hf::weight(p, hf::kQNorm));
      e.k_norm = load_f32_tensor(student, hf::weight(p, hf::kKNorm));
    }
    const std::initializer_list<const char*> mods[4] = {{hf::kQ, hf::kK, hf::kV}, {hf::kO}, {hf::kGate, hf::kUp}, {hf::kDown}};
    for (int i = 0; i < 4; ++i) {
      StudentGroup& g = *e.group(i);
      for (const char* m : mods[i]) {
        auto it = codes.find(p + m);
        if (it == codes.end()) fail("ptqr e2e: no codes for ", p + m);
        StudentPart part;
        part.module = p + m;
        part.N = it->second.N;
        part.qw = std::move(it->second);
        if (g.K == 0) g.K = part.qw.K;
        if (part.qw.K != g.K) fail("ptqr e2e: ", part.module, " has ", part.qw.K, " inputs, its group ", g.K);
        g.N += part.N;
        g.parts.push_back(std::move(part));
      }
      g.bias = group_bias(student, p, mods[i]);
    }
  }
  // ---- multipliers of the block-wise scales, AdamW on them ----
  struct Trained {
    std::string module;
    QuantWeight* qw;
    std::vector<float> s0, mult, grad;
    std::unique_ptr<AdamW> opt;
    std::vector<float>* scale_grad;
  };
  auto set_scales = [](Trained& t) {  // s = round(s0 m) to the storage dtype
    for (size_t j = 0; j < t.s0.size(); ++j) t.qw->scale[j] = round_to_dtype(t.s0[j] * t.mult[j], t.qw->spec.scale_dtype);
  };
  std::vector<Trained> tr;
  E2eCheckpoint ck;
  for (E2eLayer& e : layers)
    for (int i = 0; i < 4; ++i) {
      StudentGroup& g = *e.group(i);
      e.scale_grad[i].assign(g.parts.size(), {});
      for (size_t pi = 0; pi < g.parts.size(); ++pi) {
        Trained t;
        t.module = g.parts[pi].module;
        t.qw = &g.parts[pi].qw;
        t.s0 = t.qw->scale;
        t.mult.assign(t.s0.size(), 1.f);
        t.grad.resize(t.s0.size());
        t.opt = std::make_unique<AdamW>(static_cast<int64_t>(t.s0.size()));
        t.scale_grad = &e.scale_grad[i][pi];
        if (resume) {
          const std::string& m = g.parts[pi].module;
          const auto im = resume->mult.find(m);
          const auto jm = resume->m.find(m), jv = resume->v.find(m);
          if (im == resume->mult.end() || jm == resume->m.end() || jv == resume->v.end() ||
              im->second.size() != t.mult.size() || jm->second.size() != t.mult.size() ||
              jv->second.size() != t.mult.size())
            fail("ptqr e2e --resume: the checkpoint has no state of the right size for ", m);
          t.mult = im->second;
          t.opt->m() = jm->second;
          t.opt->v() = jv->second;
          set_scales(t);
        }
        tr.push_back(std::move(t));
      }
    }
  auto forward = [&](int64_t w, std::vector<std::vector<float>>* xs_out, std::vector<float>& x) {
    x = embed_windows(student, {windows[w]});
    for (int64_t l = 0; l < L; ++l) {
      if (xs_out) (*xs_out)[l] = x;
      serve_layer(ctx, c, rope, o.kv, layers[l], x.data(), T);
    }
  };
  // Scored windows: every one, or the held-out ones.
  const int64_t w0 = o.holdout > 0 ? n_train : 0, n_scored = nw - w0;
  auto eval_all = [&](double& kl, double& agree) {
    int64_t n_agree = 0;
    double sum = 0;
    std::vector<float> x, z(T * V), zt(T * V);
    for (int64_t w = w0; w < nw; ++w) {
      forward(w, nullptr, x);
      e2e_logits(ctx, c, head, x.data(), T, z.data());
      e2e_logits(ctx, c, head, teacher_final.data() + w * T * H, T, zt.data());
      sum += kl_of(ctx, z.data(), zt.data(), T, V, nullptr, &n_agree);
    }
    kl = sum / static_cast<double>(n_scored);
    agree = static_cast<double>(n_agree) / static_cast<double>(n_scored * T);
  };

  int64_t t0 = 0;
  if (resume) {
    t0 = resume->step;
    rep.step_kl = resume->step_kl;
    rep.resumed_from = t0;
    rep.kl_before = resume->kl_before, rep.agree_before = resume->agree_before;
    ck.best_step = resume->best_step, ck.best_kl = resume->best_kl, ck.best_mult = resume->best_mult;
  } else {
    eval_all(rep.kl_before, rep.agree_before);
    ck.best_step = 0, ck.best_kl = rep.kl_before;
  }
  ck.kl_before = rep.kl_before, ck.agree_before = rep.agree_before;
  if (o.progress)
    std::fprintf(stderr, "ptqr e2e: KL %.6f, top-1 %.4f over %lld %swindows with the block-wise scales\n", rep.kl_before,
                 rep.agree_before, static_cast<long long>(n_scored), o.holdout > 0 ? "held-out " : "");
  auto checkpoint = [&](int64_t step) {
    if (!save) return;
    ck.step = step;
    ck.step_kl = rep.step_kl;
    for (const Trained& t : tr) {
      ck.mult[t.module] = t.mult;
      ck.m[t.module] = t.opt->m();
      ck.v[t.module] = t.opt->v();
    }
    save(ck);
  };
  const int64_t warm = static_cast<int64_t>(o.warmup_frac * static_cast<double>(o.steps));
  AdamWOptions ao;
  ao.weight_decay = 0;
  double train_s = 0, ema = 0;
  for (int64_t t = t0; t < o.steps; ++t) {
    const Timer step_timer;
    // Every training window once per epoch of n_train steps, in an order shuffled per epoch (a function of t:
    // resume-safe).
    std::vector<int64_t> order(n_train);
    for (int64_t i = 0; i < n_train; ++i) order[i] = i;
    Rng pick(o.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(t / n_train) * 7919 + 17);
    for (int64_t i = n_train - 1; i > 0; --i) std::swap(order[i], order[pick.next() % static_cast<uint64_t>(i + 1)]);
    const int64_t w = order[t % n_train];
    std::vector<std::vector<float>> xs(L);
    std::vector<float> x, zt(T * V);
    forward(w, &xs, x);
    e2e_logits(ctx, c, head, teacher_final.data() + w * T * H, T, zt.data());
    std::vector<const float*> xp(L);
    for (int64_t l = 0; l < L; ++l) xp[l] = xs[l].data();
    for (Trained& tt : tr) std::fill(tt.scale_grad->begin(), tt.scale_grad->end(), 0.f);
    const double kl = e2e_window_grads(ctx, c, rope, o.kv, head, layers, xp, x.data(), zt.data(), T, nullptr);
    const double lr_t = lr_at(t, o.steps, warm, o.lr, o.lr_floor, true);
    for (Trained& tt : tr) {
      for (size_t j = 0; j < tt.grad.size(); ++j) tt.grad[j] = (*tt.scale_grad)[j] * tt.s0[j];  // dL/dm = s0 dL/ds
      tt.opt->step(tt.mult.data(), tt.grad.data(), t + 1, lr_t, ao);
      for (float& m : tt.mult) m = std::clamp(m, 0.5f, 2.0f);  // a scale moves at most a factor 2 from its start
      set_scales(tt);
    }
    rep.step_kl.push_back(kl);
    ema = t == t0 ? kl : 0.9 * ema + 0.1 * kl;
    train_s += step_timer.seconds();
    const double tps = static_cast<double>((t - t0 + 1) * T) / std::max(1e-9, train_s);
    if (o.progress)
      std::fprintf(stderr, "ptqr e2e: step %lld/%lld window %lld KL %.6f (ema %.6f) lr %.3g %.0f tok/s ETA %.0f s\n",
                   static_cast<long long>(t + 1), static_cast<long long>(o.steps), static_cast<long long>(w), kl, ema,
                   lr_t, tps,
                   static_cast<double>((o.steps - t - 1) * T) / tps);
    if (o.holdout > 0 && ((t + 1) % o.val_every == 0 || t + 1 == o.steps)) {
      double v = 0, agree = 0;
      eval_all(v, agree);
      if (v < ck.best_kl) {
        ck.best_kl = v, ck.best_step = t + 1;
        for (const Trained& tt : tr) ck.best_mult[tt.module] = tt.mult;
      }
      if (o.progress)
        std::fprintf(stderr, "ptqr e2e: step %lld held-out KL %.6f (start %.6f, best %.6f at step %lld)\n",
                     static_cast<long long>(t + 1), v, rep.kl_before, ck.best_kl, static_cast<long long>(ck.best_step));
    }
    if ((t + 1) % 5 == 0 || t + 1 == o.steps) checkpoint(t + 1);
    if (o.stop_after >= 0 && t + 1 >= o.stop_after && t + 1 < o.steps) {
      if ((t + 1) % 5 != 0) checkpoint(t + 1);
      rep.stopped = true;
      break;
    }
  }
  const int64_t done = rep.stopped ? static_cast<int64_t>(rep.step_kl.size()) : o.steps;
  rep.tokens_per_s = train_s > 0 ? static_cast<double>((done - t0) * T) / train_s : 0;
  if (o.holdout > 0 && !rep.stopped) {  // the scales of the best held-out score (the block-wise ones at step 0)
    rep.kept_step = ck.best_step, rep.kept_kl = ck.best_kl;
    for (Trained& tt : tr) {
      const auto it = ck.best_mult.find(tt.module);
      if (ck.best_step == 0) std::fill(tt.mult.begin(), tt.mult.end(), 1.f);
      else if (it == ck.best_mult.end() || it->second.size() != tt.mult.size())
        fail("ptqr e2e: no kept multipliers for ", tt.module);
      else tt.mult = it->second;
      set_scales(tt);
    }
  }
  if (!rep.stopped) eval_all(rep.kl_after, rep.agree_after);
  if (o.progress && !rep.stopped)
    std::fprintf(stderr, "ptqr e2e: KL %.6f -> %.6f, top-1 %.4f -> %.4f over the %s windows\n", rep.kl_before,
                 rep.kl_after, rep.agree_before, rep.agree_after, o.holdout > 0 ? "held-out" : "calibration");
  for (const Trained& tt : tr)
    for (size_t j = 0; j < tt.s0.size(); ++j)
      if (tt.s0[j] != 0)
        rep.max_scale_change = std::max(rep.max_scale_change, std::abs(static_cast<double>(tt.qw->scale[j]) / tt.s0[j] - 1.0));
  // ---- the trained codes and scales back to the caller ----
  for (E2eLayer& e : layers)
    for (int i = 0; i < 4; ++i)
      for (StudentPart& p : e.group(i)->parts) codes[p.module] = std::move(p.qw);
  rep.seconds = total.seconds();
  return rep;
}

}  // namespace blockspec
