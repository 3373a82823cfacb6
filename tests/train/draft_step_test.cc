// The DFlash training step's hand-written backward against central finite
// differences of its own forward, for every parameter tensor of a tiny
// 2-layer drafter (GQA, two anchors, causal block spans), and the loss and
// the correct-slot flags against their definitions.
#include "train/draft_step.h"

#include <gtest/gtest.h>

#include <cmath>

#include "formats/hf_config.h"
#include "train/blocks.h"
#include "../kernels/randv.h"

namespace blockspec {
namespace {

TEST(DraftStep, BackwardMatchesFiniteDifferences) {
  DraftShape s;
  s.H = 8, s.n_heads = 2, s.n_kv_heads = 1, s.head_dim = 4, s.F = 12, s.n_layers = 2, s.tap_width = 6, s.V = 11;
  ModelConfig mc;
  mc.head_dim = 4, mc.rope.theta = 10000.0;
  s.rope = compute_rope(mc);
  const DraftParams p0 = DraftParams::init(s, 7, 0.3f);
  const std::vector<float> table = randv(s.V * s.H, 1), head = randv(s.V * s.H, 2), taps = randv(9 * 6, 3);
  FrozenTarget t;
  t.embed = [&](const int32_t* ids, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) std::copy(table.begin() + ids[i] * s.H, table.begin() + (ids[i] + 1) * s.H, out + i * s.H);
  };
  t.lm_head = head.data();
  DraftRow row;
  row.S = 9, row.taps = taps.data(), row.B = 4;
  for (int64_t i = 0; i < 9; ++i) row.pos.push_back(i);
  row.anchors = {2, 5};
  row.block_ids = {4, 10, 10, 10, 7, 10, 10, 10};
  // Layer 0 causal inside the block, layer 1 bidirectional with a window of 3 (as a DFlash config mixes them).
  row.layer_spans = {block_key_spans(row.anchors, std::vector<int32_t>(9, 0), 4, true, 0),
                     block_key_spans(row.anchors, std::vector<int32_t>(9, 0), 4, false, 3)};
  row.labels = {0, 3, 9, 1, 0, 5, 2, 8};
  row.weight = {0, 1, 0.7f, 0.5f, 0, 1, 0.7f, 0.f};
  row.denom = 5;
  ThreadPool pool(2);
  const KernelTable kt = select_kernels("");
  const OpContext ctx{&kt, &pool};
  DraftParams g = DraftParams::zeros(s);
  const DraftStepResult r = draft_step(s, p0, t, row, &g, ctx);
  EXPECT_GT(r.loss, 0);
  ASSERT_EQ(r.correct.size(), 8u);

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

}  // namespace
}  // namespace blockspec
