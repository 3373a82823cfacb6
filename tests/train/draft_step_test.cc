// The DFlash and DFlash2 training steps' hand-written backward against
// central finite differences of their own forward, for every parameter
// tensor of a tiny 2-layer drafter (GQA, two anchors, causal block spans;
// DFlash2 with non-identity convolutions and a selector whose label is
// once outside the top-k).
#include "train/draft_step.h"

#include <gtest/gtest.h>

#include <cmath>

#include "formats/hf_config.h"
#include "train/blocks.h"
#include "../kernels/randv.h"

namespace blockspec {
namespace {

// Every parameter tensor's gradient g at p0 against central differences of
// draft_step's loss (h = 1e-3 on f32 weights, a spread of entries each).
void expect_gradients_match_fd(const DraftShape& s, const DraftParams& p0, DraftParams& g, const FrozenTarget& t,
                               const DraftRow& row, const OpContext& ctx) {
  auto loss_of = [&](const DraftParams& p) {
    DraftParams scratch = DraftParams::zeros(s);
    return draft_step(s, p, t, row, &scratch, ctx).loss;
  };
  DraftParams p = p0;
  std::vector<std::pair<std::string, std::vector<float>*>> pt, gt;
  p.each([&](const std::string& n, std::vector<float>& v) { pt.push_back({n, &v}); });
  g.each([&](const std::string& n, std::vector<float>& v) { gt.push_back({n, &v}); });
  ASSERT_EQ(pt.size(), gt.size());
  const double h = 1e-3;
  for (size_t ti = 0; ti < pt.size(); ++ti) {
    std::vector<float>& v = *pt[ti].second;
    const std::vector<float>& gv = *gt[ti].second;
    double worst = 0, scale = 1e-4;
    for (size_t i = 0; i < v.size(); i += std::max<size_t>(1, v.size() / 7)) {  // a spread of entries
      const float keep = v[i];
      v[i] = static_cast<float>(keep + h);
      const double up = loss_of(p);
      v[i] = static_cast<float>(keep - h);
      const double down = loss_of(p);
      v[i] = keep;
      const double num = (up - down) / (2 * h);
      worst = std::max(worst, std::fabs(num - gv[i]));
      scale = std::max(scale, std::fabs(num));
    }
    EXPECT_LT(worst / scale, 2e-2) << pt[ti].first << ": max |analytic - numeric| " << worst << " of " << scale;
  }
}

// The tiny drafter both tests train: H 8, GQA 2/1, 2 layers, V 11, a row of
// 9 context tokens with anchors 2 and 5, block size 4.
struct Tiny {
  DraftShape s;
  std::vector<float> table, head, taps;
  FrozenTarget t;
  DraftRow row;
  ThreadPool pool{2};
  KernelTable kt = select_kernels("");
  OpContext ctx{&kt, &pool};
  explicit Tiny(bool d2) {
    s.H = 8, s.n_heads = 2, s.n_kv_heads = 1, s.head_dim = 4, s.F = 12, s.n_layers = 2, s.tap_width = 6, s.V = 11;
    if (d2) s.conv_kernel = 2, s.conv_group = 4, s.selector_rank = 3, s.selector_top_k = 4, s.selector_alpha = 0.8;
    ModelConfig mc;
    mc.head_dim = 4, mc.rope.theta = 10000.0;
    s.rope = compute_rope(mc);
    table = randv(s.V * s.H, 1), head = randv(s.V * s.H, 2), taps = randv(9 * 6, 3);
    t.embed = [this](const int32_t* ids, int64_t n, float* out) {
      for (int64_t i = 0; i < n; ++i)
        std::copy(table.begin() + ids[i] * s.H, table.begin() + (ids[i] + 1) * s.H, out + i * s.H);
    };
    t.lm_head = head.data();
    row.S = 9, row.taps = taps.data(), row.B = 4;
    for (int64_t i = 0; i < 9; ++i) row.pos.push_back(i);
    row.anchors = {2, 5};
    row.block_ids = {4, 10, 10, 10, 7, 10, 10, 10};
    row.labels = {0, 3, 9, 1, 0, 5, 2, 8};
  }
};

TEST(DraftStep, BackwardMatchesFiniteDifferences) {
  Tiny x(false);
  const DraftShape& s = x.s;
  DraftRow& row = x.row;
  const DraftParams p0 = DraftParams::init(s, 7, 0.3f);
  // Layer 0 causal inside the block, layer 1 bidirectional with a window of 3 (as a DFlash config mixes them).
  row.layer_spans = {block_key_spans(row.anchors, std::vector<int32_t>(9, 0), 4, true, 0),
                     block_key_spans(row.anchors, std::vector<int32_t>(9, 0), 4, false, 3)};
  row.weight = {0, 1, 0.7f, 0.5f, 0, 1, 0.7f, 0.f};
  row.denom = 5;
  DraftParams g = DraftParams::zeros(s);
  const DraftStepResult r = draft_step(s, p0, x.t, row, &g, x.ctx);
  EXPECT_GT(r.loss, 0);
  ASSERT_EQ(r.correct.size(), 8u);
  expect_gradients_match_fd(s, p0, g, x.t, row, x.ctx);
}

TEST(DraftStep, Dflash2BackwardMatchesFiniteDifferences) {
  Tiny x(true);
  const DraftShape& s = x.s;
  DraftRow& row = x.row;
  DraftParams p0 = DraftParams::init(s, 7, 0.3f);
  // Identity init would hide the conv and selector terms: random ones instead.
  uint64_t seed = 40;
  p0.each([&](const std::string& n, std::vector<float>& v) {
    if (n.find("conv") == std::string::npos && n.find("selector") == std::string::npos) return;
    const std::vector<float> r = randv(v.size(), ++seed);
    for (size_t i = 0; i < v.size(); ++i) v[i] = (n.find("base_kernel") != std::string::npos ? 1.f : 0.f) + 0.5f * r[i];
  });
  row.spans = block_key_spans(row.anchors, std::vector<int32_t>(9, 0), 4, false, 3);
  row.prev_ids = {0, 4, 3, 9, 0, 7, 5, 2};
  row.weight = {0, 1, 0.7f, 0.5f, 0, 1, 0.7f, 0.3f};
  row.denom = 6;
  DraftParams g = DraftParams::zeros(s);
  const DraftStepResult r = draft_step(s, p0, x.t, row, &g, x.ctx);
  EXPECT_GT(r.selector_loss, 0);
  EXPECT_DOUBLE_EQ(r.loss, r.unary_loss + r.selector_loss);
  // Some label lies outside its slot's top-4: the injected-candidate path runs.
  const DraftStepResult f = draft_step(s, p0, x.t, row, nullptr, x.ctx);
  int outside = 0;
  for (int64_t i = 0; i < 8; ++i) {
    if (row.weight[i] == 0) continue;
    std::vector<float> z(f.logits.begin() + i * s.V, f.logits.begin() + (i + 1) * s.V);
    int above = 0;
    for (float v : z) above += v > z[row.labels[i]];
    outside += above >= 4;
  }
  EXPECT_GT(outside, 0);
  expect_gradients_match_fd(s, p0, g, x.t, row, x.ctx);
}

}  // namespace
}  // namespace blockspec
