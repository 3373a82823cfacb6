#include "ptqr/ptqr_drafter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/timer.h"
#include "base/memory_bandwidth.h"
#include "formats/dflash_config.h"
#include "formats/safetensors.h"
#include "model/transformer.h"
#include "ptqr/ptqr.h"
#include "ptqr/student.h"
#include "quantize/drafter_calibration.h"
#include "quantize/quantize.h"
#include "quantize/writer.h"
#include "runtime/sampler.h"
#include "train/blocks.h"
#include "train/draft_rows.h"
#include "train/frozen_target.h"

namespace blockspec {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// One quantized linear group of the drafter: its latent masters (StudentGroup, gate | up fused as the
// DraftParams tensor is) and the student's / the gradient's tensor of the same shape.
struct Module {
  StudentGroup g;
  std::vector<float>* fq = nullptr;    // the student's weights: the current codes dequantized
  std::vector<float>* grad = nullptr;  // dL/d(fq) = dL/d(latent) (straight through)
};

// The quantized tensors of DraftParams (fc and every *_proj) as Modules.
std::vector<Module> make_modules(DraftParams& teacher, DraftParams& student, DraftParams& grad, const DraftShape& s) {
  std::map<std::string, std::vector<float>*> st, gr;
  student.each([&](const std::string& n, std::vector<float>& v) { st[n] = &v; });
  grad.each([&](const std::string& n, std::vector<float>& v) { gr[n] = &v; });
  std::vector<Module> mods;
  teacher.each([&](const std::string& n, std::vector<float>& v) {
    const bool fc = n == "fc.weight", proj = n.size() > 12 && n.substr(n.size() - 12) == "_proj.weight";
    if (!fc && !proj) return;
    Module m;
    const std::string base = n.substr(0, n.size() - 7);  // without ".weight"
    const int64_t K = fc ? s.tap_width : n.find("down_proj") != std::string::npos ? s.F
                        : n.find("o_proj") != std::string::npos ? s.n_heads * s.head_dim : s.H;
    const int64_t N = static_cast<int64_t>(v.size()) / K;
    m.g.K = K, m.g.N = N;
    auto part = [&](const std::string& module, int64_t rows, const float* w) {
      StudentPart p;
      p.module = module, p.N = rows;
      p.w.assign(w, w + rows * K);
      p.opt = std::make_unique<AdamW>(rows * K);
      m.g.parts.push_back(std::move(p));
    };
    if (const size_t at = base.find("gate_up_proj"); at != std::string::npos) {  // rows: gate then up
      part(base.substr(0, at) + "gate_proj", N / 2, v.data());
      part(base.substr(0, at) + "up_proj", N / 2, v.data() + (N / 2) * K);
    } else {
      part(base, N, v.data());
    }
    m.fq = st.at(n), m.grad = gr.at(n);
    mods.push_back(std::move(m));
  });
  return mods;
}

void requantize_all(std::vector<Module>& mods, const QuantSpec& spec, double sigma, uint64_t seed, ThreadPool& pool) {
  for (size_t i = 0; i < mods.size(); ++i) {
    requantize(mods[i].g, spec, sigma, seed * 1000003 + i * 65537, pool);
    *mods[i].fq = mods[i].g.deq;
  }
}

// What --resume must find unchanged.
json fingerprint(const PtqrDrafterOptions& o) {
  return {{"drafter", o.drafter}, {"data", o.data}, {"steps", o.steps}, {"seq_len", o.seq_len},
          {"max_anchors", o.max_anchors}, {"gamma", o.gamma}, {"lr", o.lr}, {"dither_start", o.dither_start},
          {"dither_decay", o.dither_decay}, {"seed", o.seed}};
}

std::string state_path(const PtqrDrafterOptions& o) { return o.out + ".ptqr-state/drafter_state.safetensors"; }

Tensor f64_tensor(const std::vector<double>& v) {
  Tensor t(DType::kF64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.mutable_ptr<double>());
  return t;
}

// Latent masters and AdamW moments of every part after `step` steps, written atomically.
void save_state(const PtqrDrafterOptions& o, const std::vector<Module>& mods, int64_t step) {
  NamedTensors t;
  for (const Module& m : mods)
    for (const StudentPart& p : m.g.parts) {
      Tensor w(DType::kF32, {p.N, m.g.K});
      std::copy(p.w.begin(), p.w.end(), w.mutable_ptr<float>());
      t.emplace_back(p.module + ".latent", w);
      t.emplace_back(p.module + ".adamw_m", f64_tensor(p.opt->m()));
      t.emplace_back(p.module + ".adamw_v", f64_tensor(p.opt->v()));
    }
  const std::string path = state_path(o), tmp = path + ".tmp";
  fs::create_directories(fs::path(path).parent_path());
  write_safetensors(tmp, t, {{"step", std::to_string(step)}, {"fingerprint", fingerprint(o).dump()}});
  fs::rename(tmp, path);
}

// The step the saved state reached (its masters and moments restored), or 0 when there is none.
int64_t load_state(const PtqrDrafterOptions& o, std::vector<Module>& mods) {
  const std::string path = state_path(o);
  if (!fs::exists(path)) return 0;
  SafetensorsFile f(path);
  const auto fp = f.metadata().find("fingerprint"), st = f.metadata().find("step");
  if (fp == f.metadata().end() || st == f.metadata().end() || json::parse(fp->second) != fingerprint(o))
    fail("--resume: ", path, " was made by another ptqr command; delete it or repeat that command");
  for (Module& m : mods)
    for (StudentPart& p : m.g.parts) {
      const Tensor w = f.tensor(p.module + ".latent");
      if (w.dtype() != DType::kF32 || w.numel() != p.N * m.g.K) fail(path, ": ", p.module, ".latent has the wrong shape");
      std::copy(w.ptr<float>(), w.ptr<float>() + w.numel(), p.w.begin());
      for (const char* which : {"m", "v"}) {
        const Tensor t = f.tensor(p.module + ".adamw_" + which);
        std::vector<double>& dst = which[0] == 'm' ? p.opt->m() : p.opt->v();
        if (t.dtype() != DType::kF64 || t.numel() != static_cast<int64_t>(dst.size()))
          fail(path, ": ", p.module, ".adamw_", which, " has the wrong shape");
        std::copy(t.ptr<double>(), t.ptr<double>() + t.numel(), dst.begin());
      }
    }
  return std::stoll(st->second);
}

// A held-out row: its blocks (fixed anchors) and the teacher's logits on them.
struct ValRow {
  Packed pk;
  Blocks blk;
  std::vector<float> teacher;  // [nA * B, V]
};

PtqrDrafterEval evaluate(const std::vector<ValRow>& val, const DraftShape& s, const DraftParams& p,
                         const FrozenTarget& t, int64_t B, const OpContext& ctx) {
  PtqrDrafterEval e;
  SlotTally tally(B);
  for (const ValRow& v : val) {
    DraftRow row = v.blk.row;
    row.taps = v.pk.taps.data();
    row.teacher_logits = v.teacher.data();
    const DraftStepResult r = draft_step(s, p, t, row, nullptr, ctx);
    e.kl += r.unary_loss / static_cast<double>(val.size());
    tally.add(r, v.blk);
  }
  e.eal = tally.eal();
  e.slot_acc = tally.acc();
  return e;
}

}  // namespace

DraftParams w8a8_rtn_student(const DraftParams& teacher, const DraftShape& s, const QuantSpec& spec, ThreadPool& pool) {
  DraftParams t = teacher, student = teacher, grad = DraftParams::zeros(s);
  std::vector<Module> mods = make_modules(t, student, grad, s);
  requantize_all(mods, spec, 0.0, 0, pool);
  return student;
}

PtqrDrafterReport run_ptqr_drafter(const PtqrDrafterOptions& o) {
  const Timer run;
  if (o.steps < 1) fail("ptqr: --steps must be >= 1, found ", o.steps);
  if (o.target.empty()) fail("ptqr: a drafter needs --target (the model whose taps it reads)");
  if (o.data.empty()) fail("ptqr: a drafter needs --drafter-data (draft_data.bin of `train-drafter --data-only`)");
  const DraftConfig dc = load_draft_config(o.drafter);
  if (dc.method != DraftMethod::kDFlash)
    fail("ptqr: ", o.drafter, " is a ", draft_method_name(dc.method), " drafter; only DFlash drafters retrain so far");
  for (size_t i = 0; i < dc.layer_causal.size(); ++i)
    if (dc.layer_causal[i] || (i < dc.layer_window.size() && dc.layer_window[i] > 0))
      fail("ptqr: ", o.drafter, ": layer ", i, " is causal or sliding; only full-block DFlash layers retrain so far");
  if (dc.output_multiplier != 1.0 || dc.final_logit_softcapping != 0.0 || dc.input_embedding_scale != 1.0)
    fail("ptqr: ", o.drafter, ": logit / embedding scales are not supported by the trainer's forward");
  check_drafter_against_target(o.drafter, o.target);  // `blockspec check DRAFTER --target TARGET`'s checks
  ModelOptions mo;
  mo.n_threads = o.n_threads;
  auto model = Transformer::load(o.target, mo);
  const ModelConfig& tc = model->config();
  const OpContext ctx = model->op_context();
  ThreadPool& pool = *ctx.pool;

  DraftShape s;
  s.H = dc.base.hidden_size, s.n_heads = dc.base.n_heads, s.n_kv_heads = dc.base.n_kv_heads;
  s.head_dim = dc.base.head_dim, s.F = dc.base.intermediate_size, s.n_layers = dc.base.n_layers;
  s.tap_width = dc.n_taps() * tc.hidden_size;
  s.V = dc.draft_vocab_size > 0 ? dc.draft_vocab_size : tc.vocab_size;
  s.eps = static_cast<float>(dc.base.rms_norm_eps);
  s.rope = compute_rope(dc.base);
  DraftArch arch;
  arch.block_size = dc.block_size;
  arch.mask_token_id = dc.mask_token_id;
  arch.target_layer_ids = dc.target_layer_ids;
  arch.target_vocab_size = tc.vocab_size;
  // A drafter trained causal in the block (train-drafter --block-attention causal) retrains causal.
  const int64_t n_causal = std::count(dc.layer_causal.begin(), dc.layer_causal.end(), true);
  if (dc.method == DraftMethod::kDFlash && n_causal > 0) {
    if (n_causal != static_cast<int64_t>(dc.layer_causal.size()))
      fail("ptqr: ", o.drafter, " mixes causal and bidirectional layers; the retraining runs one kind");
    arch.causal = true;
  }
  const SafetensorsCheckpoint ck(o.drafter);
  if (dc.draft_vocab_size > 0) {  // target id of draft id i = i + d2t[i]
    const Tensor d2t = ck.tensor("d2t");
    if (d2t.dtype() != DType::kI64 || d2t.numel() != dc.draft_vocab_size)
      fail(o.drafter, ": d2t must be int64 [", dc.draft_vocab_size, "]");
    for (int64_t i = 0; i < d2t.numel(); ++i) arch.draft_vocab.push_back(static_cast<int32_t>(i + d2t.ptr<int64_t>()[i]));
  }
  const DraftData data(o.data);
  if (data.n_taps() * data.hidden() != s.tap_width)
    fail("ptqr: ", o.data, " has ", data.n_taps(), " taps x ", data.hidden(), ", the drafter reads ", s.tap_width);
  auto frozen = freeze_target(*model, pool, true, arch.draft_vocab);
  const FrozenTarget& ft = frozen->view;

  DraftParams teacher = DraftParams::zeros(s);
  read_draft_params(o.drafter, s, teacher);
  DraftParams student = teacher, grad = DraftParams::zeros(s);
  std::vector<Module> mods = make_modules(teacher, student, grad, s);
  QuantizeOptions qo;
  qo.in = o.drafter, qo.out = o.out, qo.scheme = QScheme::kW8A8, qo.group = 128, qo.n_threads = o.n_threads;
  qo.progress = false;
  const QuantSpec spec = quant_spec_for(qo, QScheme::kW8A8, ck.entry("fc.weight").dtype);
  DraftShape ss = s;  // the student: int8 activations
  ss.act_int8 = true;

  // ---- data: training rows by epoch, held-out rows with fixed anchors and the teacher's logits ----
  const Split sp = split_records(data, o.val_frac, o.seq_len);
  if (sp.train.empty() || sp.val.empty()) fail("ptqr: ", o.data, " has too few records with a response to train on");
  const std::vector<float> slot_w = exp_decay_weights(arch.block_size, o.gamma);
  const std::vector<int32_t> t2d = target_to_draft(arch);
  std::vector<ValRow> val;
  const std::vector<int64_t> val_recs(sp.val.begin(), sp.val.begin() + std::min<size_t>(sp.val.size(), o.max_val_records));
  int64_t vi = 0;
  for (const std::vector<int64_t>& recs : pack_rows(data, val_recs, o.seq_len)) {
    ValRow v;
    v.pk = build_row(data, recs, o.seq_len);
    Rng rng = eval_anchor_rng(o.seed, ++vi);
    std::vector<int64_t> anchors = select_anchors(v.pk.mask, v.pk.doc, o.max_anchors, rng);
    if (anchors.empty()) continue;
    v.blk = make_blocks(v.pk, std::move(anchors), arch, t2d, slot_w, false);
    v.blk.row.taps = v.pk.taps.data();
    v.teacher = draft_step(s, teacher, ft, v.blk.row, nullptr, ctx).logits;
    val.push_back(std::move(v));
  }
  PtqrDrafterReport rep;
  rep.n_val_records = static_cast<int64_t>(val_recs.size());
  rep.n_train_records = static_cast<int64_t>(sp.train.size());
  rep.teacher = evaluate(val, s, teacher, ft, arch.block_size, ctx);
  requantize_all(mods, spec, 0.0, o.seed, pool);
  rep.rtn = evaluate(val, ss, student, ft, arch.block_size, ctx);
  if (o.progress)
    std::fprintf(stderr, "ptqr drafter: held-out %zu rows | teacher eal %.3f | W8A8 RTN KL %.5f eal %.3f\n", val.size(),
                 rep.teacher.eal, rep.rtn.kl, rep.rtn.eal);

  // ---- training ----
  int64_t step = o.resume ? load_state(o, mods) : 0;
  rep.resumed_from = step;
  PtqrOptions dither;  // ptqr.h's schedule over this run's steps
  dither.steps = o.steps, dither.dither_start = o.dither_start, dither.dither_decay = o.dither_decay;
  const int64_t warm = static_cast<int64_t>(std::ceil(o.warmup_frac * static_cast<double>(o.steps)));
  const AdamWOptions ao{o.lr, 0.9, 0.95, 1e-8, 0.0};
  std::vector<std::vector<int64_t>> rows;  // the current epoch's packed rows
  int64_t epoch = -1, row_base = 0, tokens = 0, steps_run = 0;
  const Timer train;
  double last_print = -1, kl_sum = 0;
  const int64_t stop = o.stop_after_steps >= 0 ? std::min(o.steps, o.stop_after_steps) : o.steps;
  for (; step < stop; ++step) {
    // Row `step` of the concatenated epochs (each epoch a fresh shuffle of the training records).
    while (epoch < 0 || step - row_base >= static_cast<int64_t>(rows.size())) {
      if (epoch >= 0) row_base += static_cast<int64_t>(rows.size());
      rows = pack_rows(data, epoch_order(sp.train, o.seed, ++epoch), o.seq_len);
    }
    const Packed pk = build_row(data, rows[step - row_base], o.seq_len);
    Rng rng = train_anchor_rng(o.seed, step);
    std::vector<int64_t> anchors = select_anchors(pk.mask, pk.doc, o.max_anchors, rng);
    const double sigma = dither_sigma(dither, step);
    requantize_all(mods, spec, sigma, o.seed + static_cast<uint64_t>(step) * 104729, pool);
    double kl = 0;
    if (!anchors.empty()) {
      Blocks blk = make_blocks(pk, std::move(anchors), arch, t2d, slot_w, false);
      blk.row.taps = pk.taps.data();
      const std::vector<float> tl = draft_step(s, teacher, ft, blk.row, nullptr, ctx).logits;
      blk.row.teacher_logits = tl.data();
      grad.each([](const std::string&, std::vector<float>& v) { std::fill(v.begin(), v.end(), 0.f); });
      kl = draft_step(ss, student, ft, blk.row, &grad, ctx).loss;
      std::vector<std::pair<float*, int64_t>> gs;
      for (Module& m : mods) gs.push_back({m.grad->data(), static_cast<int64_t>(m.grad->size())});
      clip_grad_norm(gs, o.clip);
      const double lr = lr_at(step, o.steps, warm, o.lr, o.lr_floor, true);
      for (Module& m : mods) {
        int64_t row0 = 0;
        for (StudentPart& p : m.g.parts) {
          p.opt->step(p.w.data(), m.grad->data() + row0 * m.g.K, step + 1, lr, ao);
          row0 += p.N;
        }
      }
    }
    tokens += pk.S, ++steps_run, kl_sum += kl;
    const double el = train.seconds();
    if (o.progress && (el - last_print >= 10 || step + 1 == o.steps)) {
      last_print = el;
      std::fprintf(stderr, "ptqr drafter step %lld/%lld | KL %.5f | sigma %.3g | %.0f tok/s | ETA %.0f s\n",
                   static_cast<long long>(step + 1), static_cast<long long>(o.steps), kl_sum / steps_run, sigma,
                   tokens / std::max(1e-9, el), el / steps_run * (o.steps - step - 1));
    }
    if ((step + 1) % o.eval_every == 0 && step + 1 < o.steps) save_state(o, mods, step + 1);
  }
  if (step < o.steps) {  // --stop-after: keep the state for --resume
    save_state(o, mods, step);
    rep.stopped = true;
    rep.steps = steps_run;
    rep.seconds = run.seconds();
    rep.peak_rss_mb = peak_rss_mb();
    return rep;
  }
  const double train_s = train.seconds();
  rep.steps = steps_run;
  rep.tokens_per_s = train_s > 0 ? tokens / train_s : 0;

  // ---- the sigma = 0 codes: evaluated, audited, exported through quantize's writer ----
  requantize_all(mods, spec, 0.0, o.seed, pool);
  rep.trained = evaluate(val, ss, student, ft, arch.block_size, ctx);
  for (Module& m : mods)
    for (size_t i = 0; i < m.g.parts.size(); ++i) {
      rep.rel_err.emplace_back(m.g.parts[i].module, relative_dequant_error(m.g, i));
      qo.fixed[m.g.parts[i].module] = m.g.parts[i].qw;
    }
  const QuantizeReport qr = quantize_model(qo);
  rep.n_copied = qr.n_copied;
  rep.out_bytes = qr.out_bytes;
  fs::remove_all(o.out + ".ptqr-state");
  rep.seconds = run.seconds();
  rep.peak_rss_mb = peak_rss_mb();
  return rep;
}

}  // namespace blockspec
