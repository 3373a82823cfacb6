#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "base/error.h"
#include "base/timer.h"
#include "train/blocks.h"

namespace blockspec {

namespace {

namespace fs = std::filesystem;

// One packed training row: documents back to back, positions restarting
// at 0 per document (training.md §1).
struct Packed {
  int64_t S = 0;
  std::vector<float> taps;      // [S, width]
  std::vector<int64_t> pos;     // [S]
  std::vector<int32_t> doc;     // [S] document within the row
  std::vector<int32_t> tok;     // [S] the data = the target's greedy tokens = the labels (training.md §8)
  std::vector<uint8_t> mask;    // [S] 1 on response tokens
};

// Tokens of record r a row uses: those with taps, at most seq_len.
int64_t usable(const DraftRecordView& r, int64_t seq_len) { return std::min(r.rows, seq_len); }
bool trainable(const DraftRecordView& r, int64_t seq_len) { return usable(r, seq_len) > r.n_prompt + 1; }

// Greedy packing of records (in `order`) into rows of <= seq_len tokens.
std::vector<std::vector<int64_t>> pack(const DraftData& d, const std::vector<int64_t>& order, int64_t seq_len) {
  std::vector<std::vector<int64_t>> rows;
  int64_t used = seq_len;
  for (int64_t r : order) {
    const int64_t n = usable(d.records()[r], seq_len);
    if (used + n > seq_len) rows.emplace_back(), used = 0;
    rows.back().push_back(r);
    used += n;
  }
  return rows;
}

Packed build(const DraftData& d, const std::vector<int64_t>& recs, int64_t seq_len) {
  Packed p;
  const int64_t width = d.n_taps() * d.hidden();
  for (size_t di = 0; di < recs.size(); ++di) {
    const DraftRecordView& r = d.records()[recs[di]];
    const int64_t n = usable(r, seq_len);
    append_taps_f32(r, width, 0, n, p.taps);
    for (int64_t i = 0; i < n; ++i) {
      p.pos.push_back(i);
      p.doc.push_back(static_cast<int32_t>(di));
      p.tok.push_back(r.tokens[i]);
      p.mask.push_back(i >= r.n_prompt ? 1 : 0);
    }
    p.S += n;
  }
  return p;
}

// Target id -> draft id (-1: outside the draft vocabulary); empty: the full vocabulary.
std::vector<int32_t> target_to_draft(const DraftArch& a) {
  std::vector<int32_t> t2d;
  if (a.draft_vocab.empty()) return t2d;
  t2d.assign(a.target_vocab_size, -1);
  for (size_t i = 0; i < a.draft_vocab.size(); ++i) t2d[a.draft_vocab[i]] = static_cast<int32_t>(i);
  return t2d;
}

// The DraftRow of a packed row for these anchors, and which slots the
// metrics count (those the loss trains, plus slots whose target token is
// outside a reduced draft vocabulary: never draftable, so counted wrong).
struct Blocks {
  DraftRow row;
  std::vector<float> counted;  // [nA * B]
};
Blocks make_blocks(const Packed& pk, std::vector<int64_t> anchors, const DraftArch& a, const std::vector<int32_t>& t2d,
                   const std::vector<float>& slot_w, bool dflash2) {
  const int64_t B = a.block_size;
  Blocks b;
  DraftRow& row = b.row;
  row.S = pk.S, row.taps = pk.taps.data(), row.pos = pk.pos, row.B = B;
  const BlockTargets bt = block_targets(anchors, pk.tok, pk.mask, pk.doc, B);
  // DFlash: full-attention layers, the whole block; DFlash2: sliding layers, bidirectional in the block.
  row.spans = block_key_spans(anchors, pk.doc, B, false, dflash2 ? a.sliding_window : 0);
  if (dflash2) {  // the selector's predecessor of slot k: the data token at a + k - 1
    row.prev_ids.assign(anchors.size() * B, 0);
    for (size_t j = 0; j < anchors.size(); ++j)
      for (int64_t k = 1; k < B && anchors[j] + k - 1 < pk.S; ++k) row.prev_ids[j * B + k] = pk.tok[anchors[j] + k - 1];
  }
  row.block_ids.assign(anchors.size() * B, a.mask_token_id);
  for (size_t j = 0; j < anchors.size(); ++j) row.block_ids[j * B] = pk.tok[anchors[j]];
  row.labels = bt.labels;
  row.weight.resize(bt.mask.size());
  b.counted = bt.mask;
  double n = 0;
  for (size_t i = 0; i < bt.mask.size(); ++i) {
    float m = bt.mask[i];
    if (m > 0 && !t2d.empty()) {
      const int32_t d = t2d[row.labels[i]];
      row.labels[i] = d < 0 ? 0 : d;
      if (d < 0) m = 0;  // untrainable: the draft head has no row for it
    }
    row.weight[i] = m * slot_w[i % B], n += m;
  }
  row.denom = n + 1e-5;  // unweighted denominator, as speculators (training.md §3)
  row.anchors = std::move(anchors);
  return b;
}

struct Split {
  std::vector<int64_t> train, val;
};
Split split(const DraftData& d, const TrainOptions& o) {
  Split s;
  const int64_t every = o.val_frac > 0 ? std::max<int64_t>(2, std::llround(1.0 / o.val_frac)) : 0;
  for (int64_t i = 0; i < static_cast<int64_t>(d.records().size()); ++i) {
    if (!trainable(d.records()[i], o.seq_len)) continue;
    (every > 0 && i % every == every - 1 ? s.val : s.train).push_back(i);
  }
  return s;
}

// Epoch e's order of the training records: a shuffle seeded by (seed, e).
std::vector<int64_t> epoch_order(const std::vector<int64_t>& train, uint64_t seed, int64_t e) {
  std::vector<int64_t> o = train;
  Rng rng(seed * 1000003 + static_cast<uint64_t>(e) + 1);
  for (int64_t i = static_cast<int64_t>(o.size()) - 1; i > 0; --i)
    std::swap(o[i], o[static_cast<int64_t>(rng.next() % static_cast<uint64_t>(i + 1))]);
  return o;
}

// Correct counted slots of many blocks: eal and accuracy per slot.
struct SlotTally {
  int64_t B;
  std::vector<uint8_t> correct;
  std::vector<float> mask;
  std::vector<double> hits, seen;
  explicit SlotTally(int64_t b) : B(b), hits(b, 0.0), seen(b, 0.0) {}
  void add(const DraftStepResult& r, const Blocks& b) {
    for (size_t i = 0; i < r.correct.size(); ++i) {
      const float m = b.counted[i] > 0 ? 1.f : 0.f;
      const uint8_t ok = r.correct[i] && b.row.weight[i] > 0;  // an out-of-vocabulary slot is never right
      correct.push_back(ok);
      mask.push_back(m);
      hits[i % B] += m * ok;
      seen[i % B] += m;
    }
  }
  double eal() const { return expected_acceptance_length(correct, mask, B); }
  std::vector<double> acc() const {
    std::vector<double> a(B, 0.0);
    for (int64_t k = 0; k < B; ++k) a[k] = seen[k] > 0 ? hits[k] / seen[k] : 0;
    return a;
  }
};

}  // namespace

std::vector<int32_t> choose_draft_vocab(const DraftData& data, int64_t n, int64_t V) {
  if (n < 1 || n > V) fail("--draft-vocab must be in [1, ", V, "], found ", n);
  std::vector<int64_t> count(V, 0);
  for (const DraftRecordView& r : data.records())
    for (int64_t i = r.n_prompt; i < r.n_tokens; ++i)
      if (r.tokens[i] >= 0 && r.tokens[i] < V) ++count[r.tokens[i]];
  std::vector<int32_t> ids(V);
  for (int32_t i = 0; i < V; ++i) ids[i] = i;
  // Most frequent first, ties (and the never-seen padding) by ascending id.
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return count[a] > count[b]; });
  ids.resize(n);
  std::sort(ids.begin(), ids.end());
  return ids;
}

EvalResult evaluate_drafter(const DraftData& data, const std::vector<int64_t>& records, const FrozenTarget& target,
                            const DraftShape& s, const DraftParams& p, const DraftArch& arch, const TrainOptions& o,
                            const OpContext& ctx) {
  const int64_t B = arch.block_size;
  const std::vector<int32_t> t2d = target_to_draft(arch);
  EvalResult r;
  SlotTally tally(B);
  const std::vector<float> w = exp_decay_weights(B, o.gamma);
  int64_t row_i = 0;
  double loss = 0;
  for (const std::vector<int64_t>& recs : pack(data, records, o.seq_len)) {
    const Packed pk = build(data, recs, o.seq_len);
    Rng rng(o.seed + 7919 * static_cast<uint64_t>(++row_i));  // the same anchors at every evaluation
    std::vector<int64_t> anchors = select_anchors(pk.mask, pk.doc, o.max_anchors, rng);
    if (anchors.empty()) continue;
    const Blocks blk = make_blocks(pk, std::move(anchors), arch, t2d, w, s.dflash2());
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
  const Split sp = split(data, o);
  if (sp.train.empty()) fail("train-drafter: no record with a response to train on");
  // Steps of every epoch (one per packed row), for the schedule and resuming.
  std::vector<int64_t> epoch_rows;
  int64_t total = 0;
  for (int64_t e = 0; e < o.epochs; ++e) {
    epoch_rows.push_back(static_cast<int64_t>(pack(data, epoch_order(sp.train, o.seed, e), o.seq_len).size()));
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
  const std::vector<float> w = exp_decay_weights(B, o.gamma);
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
    const std::vector<std::vector<int64_t>> rows = pack(data, epoch_order(sp.train, o.seed, e), o.seq_len);
    for (int64_t ri = first; ri < static_cast<int64_t>(rows.size()) && step < stop; ++ri) {
      const Packed pk = build(data, rows[ri], o.seq_len);
      Rng rng(o.seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(step + 1)));  // anchors: a function of the step
      std::vector<int64_t> anchors = select_anchors(pk.mask, pk.doc, o.max_anchors, rng);
      TrainProgress pr;
      if (!anchors.empty()) {
        const Blocks blk = make_blocks(pk, std::move(anchors), arch, t2d, w, s.dflash2());
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
