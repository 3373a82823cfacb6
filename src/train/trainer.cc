#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "base/error.h"
#include "base/timer.h"
#include "train/blocks.h"
#include "train/draft_rows.h"

namespace blockspec {

namespace fs = std::filesystem;

std::vector<int32_t> choose_draft_vocab(const DraftData& data, int64_t n, int64_t V, const std::string& source) {
  if (n < 1 || n > V) fail("--draft-vocab must be in [1, ", V, "], found ", n);
  std::vector<int64_t> count(V, 0);
  for (const DraftRecordView& r : data.records())
    for (int64_t i = r.n_prompt; i < r.n_tokens; ++i) {
      // An id the target cannot hold: data made for another target, never counted silently.
      if (r.tokens[i] < 0 || r.tokens[i] >= V)
        fail(source, ": record ", r.index, " holds token id ", r.tokens[i], ", outside the target's vocabulary of ", V,
             " (a file of another target?)");
      ++count[r.tokens[i]];
    }
  std::vector<int32_t> ids(V);
  for (int32_t i = 0; i < V; ++i) ids[i] = i;
  // Most frequent first, ties (and the never-seen padding) by ascending id.
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return count[a] > count[b]; });
  ids.resize(n);
  std::sort(ids.begin(), ids.end());
  return ids;
}

namespace {
// The slot weights make_blocks multiplies into the mask: gamma's exp decay, or with D-PACE 1 on every slot >= 1
// (the step weighs them from its own losses).
std::vector<float> slot_weights(int64_t B, const TrainOptions& o) {
  if (o.dpace_alpha <= 0) return exp_decay_weights(B, o.gamma);
  std::vector<float> w(B, 1.f);
  w[0] = 0.f;
  return w;
}
}  // namespace

EvalResult evaluate_drafter(const DraftData& data, const std::vector<int64_t>& records, const FrozenTarget& target,
                            const DraftShape& s, const DraftParams& p, const DraftArch& arch, const TrainOptions& o,
                            const OpContext& ctx) {
  const int64_t B = arch.block_size;
  const std::vector<int32_t> t2d = target_to_draft(arch);
  EvalResult r;
  SlotTally tally(B);
  const std::vector<float> w = slot_weights(B, o);
  int64_t row_i = 0;
  double loss = 0;
  for (const std::vector<int64_t>& recs : pack_rows(data, records, o.seq_len)) {
    const Packed pk = build_row(data, recs, o.seq_len);
    Rng rng = eval_anchor_rng(o.seed, ++row_i);
    std::vector<int64_t> anchors = select_anchors(pk.mask, pk.doc, o.max_anchors, rng);
    if (anchors.empty()) continue;
    Blocks blk = make_blocks(pk, std::move(anchors), arch, t2d, w, s.dflash2());
    blk.row.dpace_alpha = o.dpace_alpha;
    const DraftStepResult res = draft_step(s, p, target, blk.row, nullptr, ctx);
    loss += res.loss;
    tally.add(res, blk);
  }
  r.eal = tally.eal();
  r.loss = row_i > 0 ? loss / row_i : 0;
  r.slot_acc = tally.acc();
  return r;
}

TrainResult train_drafter(const DraftData& data, const FrozenTarget& target, const DraftShape& s, DraftParams& p,
                          const DraftArch& arch, const TrainOptions& o, const std::string& out_dir, bool resume,
                          const OpContext& ctx, const std::function<void(const TrainProgress&)>& progress) {
  const int64_t B = arch.block_size;
  if (s.dflash2() && !arch.draft_vocab.empty())
    fail("train-drafter: DFlash2 drafts over the full vocabulary (its selector indexes it); drop --draft-vocab");
  if (!arch.draft_vocab.empty() && static_cast<int64_t>(arch.draft_vocab.size()) != s.V)
    fail("train-drafter: a draft vocabulary of ", arch.draft_vocab.size(), " ids for a head of ", s.V, " rows");
  if (data.n_taps() * data.hidden() != s.tap_width)
    fail("train-drafter: the data has ", data.n_taps(), " taps x ", data.hidden(), ", the drafter reads ", s.tap_width);
  const Split sp = split_records(data, o.val_frac, o.seq_len);
  if (sp.train.empty()) fail("train-drafter: no record with a response to train on");
  // Steps of every epoch (one per packed row), for the schedule and resuming.
  std::vector<int64_t> epoch_rows;
  int64_t total = 0;
  for (int64_t e = 0; e < o.epochs; ++e) {
    epoch_rows.push_back(static_cast<int64_t>(pack_rows(data, epoch_order(sp.train, o.seed, e), o.seq_len).size()));
    total += epoch_rows.back();
  }
  const int64_t warmup = static_cast<int64_t>(std::ceil(o.warmup_frac * total));
  std::vector<AdamW> opt;
  std::vector<std::vector<float>*> params;  // each()'s order, as opt and the gradients
  p.each([&](const std::string&, std::vector<float>& v) {
    opt.emplace_back(static_cast<int64_t>(v.size()));
    params.push_back(&v);
  });
  const std::string state_path = (fs::path(out_dir) / "train_state.safetensors").string();
  fs::create_directories(out_dir);
  int64_t step = 0;
  if (resume && fs::exists(state_path)) step = load_train_state(state_path, p, opt);
  const std::vector<int64_t> val(sp.val.begin(), sp.val.begin() + std::min<size_t>(sp.val.size(), 64));
  TrainResult res;
  EvalResult ev = evaluate_drafter(data, val, target, s, p, arch, o, ctx);
  res.val_eal_start = ev.eal;
  const std::vector<float> w = slot_weights(B, o);
  const std::vector<int32_t> t2d = target_to_draft(arch);
  const AdamWOptions ao{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay};
  DraftParams grad = DraftParams::zeros(s);
  Timer run, since_ckpt;
  int64_t tokens = 0, steps_run = 0;
  SlotTally window(B);  // training blocks since the last evaluation
  auto checkpoint = [&] {
    save_train_state(state_path, p, opt, step);
    write_draft_checkpoint(out_dir, s, p, arch, DType::kBF16);
    since_ckpt.reset();
  };
  const int64_t stop = o.max_steps > 0 ? std::min(total, step + o.max_steps) : total;
  int64_t e = 0, first = step;
  while (e < o.epochs && first >= epoch_rows[e]) first -= epoch_rows[e++];
  for (; e < o.epochs && step < stop; ++e, first = 0) {
    const std::vector<std::vector<int64_t>> rows = pack_rows(data, epoch_order(sp.train, o.seed, e), o.seq_len);
    for (int64_t ri = first; ri < static_cast<int64_t>(rows.size()) && step < stop; ++ri) {
      const Packed pk = build_row(data, rows[ri], o.seq_len);
      Rng rng = train_anchor_rng(o.seed, step);
      std::vector<int64_t> anchors = select_anchors(pk.mask, pk.doc, o.max_anchors, rng);
      TrainProgress pr;
      if (!anchors.empty()) {
        Blocks blk = make_blocks(pk, std::move(anchors), arch, t2d, w, s.dflash2());
        blk.row.dpace_alpha = o.dpace_alpha;
        grad.each([](const std::string&, std::vector<float>& v) { std::fill(v.begin(), v.end(), 0.f); });
        const DraftStepResult r = draft_step(s, p, target, blk.row, &grad, ctx);
        std::vector<std::pair<float*, int64_t>> gs;
        grad.each([&](const std::string&, std::vector<float>& v) { gs.push_back({v.data(), static_cast<int64_t>(v.size())}); });
        pr.grad_norm = clip_grad_norm(gs, o.clip);
        pr.lr = lr_at(step, total, warmup, o.lr, o.floor_ratio, o.cosine);
        for (size_t i = 0; i < params.size(); ++i) opt[i].step(params[i]->data(), gs[i].first, step + 1, pr.lr, ao);
        pr.loss = r.loss;
        window.add(r, blk);
      }
      ++step, ++steps_run;
      tokens += pk.S;
      pr.step = step, pr.total_steps = total, pr.epoch = e;
      pr.elapsed_s = run.seconds();
      pr.tokens_per_s = tokens / std::max(1e-9, pr.elapsed_s);
      pr.eta_s = pr.elapsed_s / steps_run * (stop - step);
      pr.train_eal = window.eal();
      pr.slot_acc = window.acc();
      if (step % o.eval_every == 0 || step == stop) {
        ev = evaluate_drafter(data, val, target, s, p, arch, o, ctx);
        pr.eval = true;
        window = SlotTally(B);
      }
      pr.val_eal = ev.eal;
      pr.val_slot_acc = ev.slot_acc;
      if (progress) progress(pr);
      if (since_ckpt.seconds() >= o.checkpoint_every_s) checkpoint();
    }
  }
  checkpoint();
  res.val_eal_end = ev.eal;
  res.val_slot_acc_end = ev.slot_acc;
  res.steps = steps_run;
  res.seconds = run.seconds();
  res.tokens_per_s = tokens / std::max(1e-9, res.seconds);
  return res;
}

}  // namespace blockspec
