// DFlash / DFlash2 drafters against the z-lab reference (PyPI dflash 0.1.0)
// on tests/fixtures/dflash (scripts/make_dflash_golden.py): target taps,
// drafter hidden states and logits per block slot, drafted tokens (argmax /
// the DFlash2 selector's greedy walk with its candidate scores), a second
// draft step that appends context to the draft cache (sliding-window rings
// wrap: W = 6), and the whole greedy speculative loop (dflash_generate).
// Three drafters: f32 DFlash1 (mixed sliding-causal / full-bidirectional
// layers, attention biases, default tap ids, own RoPE theta), bf16 DFlash2
// (all layers sliding + bidirectional, taps incl. the target's last layer,
// output multiplier, softcap, embedding scale) and DFlash1 with every
// linear, fc included, in compressed-tensors int8 (W8A16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "../spec_setup.h"
#include "formats/safetensors.h"
#include "model/dflash.h"
#include "runtime/dflash_proposer.h"
#include "runtime/speculative.h"

namespace blockspec {
namespace {

std::string fixture(const std::string& n) { return std::string(BS_SOURCE_DIR) + "/tests/fixtures/dflash/" + n; }

// max |a - b| / max |b|
double rel_err(const float* a, const float* b, int64_t n) {
  double mx = 0, scale = 1e-30;
  for (int64_t i = 0; i < n; ++i) {
    mx = std::max(mx, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return mx / scale;
}

// f32 drafter vs torch f32: summation order only. The int8 drafter's
// weights are the exact dequantization, so the same bound holds.
constexpr double kTol = 2e-5;

struct Case {
  std::string dir;
  std::optional<WeightFormat> weights;  // drafter compute format (nullopt: as stored)
  double tol;
  bool exact;  // tokens and the whole loop must match too
};

// dflash-w8 (compressed-tensors W8A16 per channel) natively runs its int8
// codes as q8 weight-only (f32 activations, codes dequantized in-register),
// so, like f32 weights (the exact dequantization of the same codes), it
// matches the weight-only reference to summation order.
const Case kCases[] = {
    {"dflash", std::nullopt, kTol, true},
    {"dflash2", std::nullopt, kTol, true},
    {"dflash-w8", WeightFormat::kF32, kTol, true},
    {"dflash-w8", std::nullopt, kTol, true},
};

class DFlashGolden : public ::testing::TestWithParam<Case> {};

TEST_P(DFlashGolden, MatchesReference) {
  const Case& c = GetParam();
  const std::string D = c.dir;
  ModelOptions mo;
  mo.n_threads = 2;
  auto target = Transformer::load(fixture("target"), mo);
  auto dm = DraftModel::load(fixture(D), *target, DraftOptions{c.weights, false});
  if (D == "dflash-w8" && !c.weights) {
    EXPECT_NE(dm->weights().format_summary.find("q8"), std::string::npos);
  }
  const DraftConfig& dc = dm->config();
  target->set_tap_layers(dc.target_layer_ids);
  SafetensorsFile g(fixture("golden.safetensors"));
  const int64_t H = 64, V = 256, T = dc.n_taps(), k = 7;
  ASSERT_EQ(dc.block_size, 8);
  if (D != "dflash2") {
    EXPECT_TRUE(dc.target_layer_ids_defaulted);
    EXPECT_EQ(dc.target_layer_ids, (std::vector<int64_t>{1, 2, 3}));
  }
  for (int p = 0; p < 2; ++p) {
    const std::string pre = D + ".p" + std::to_string(p) + ".";
    Tensor ids = g.tensor("p" + std::to_string(p) + ".input_ids");
    const int64_t P = ids.numel();
    // Target taps (HF hidden_states[t + 1]; post-norm for the last layer).
    KvCache cache = target->new_cache(64);
    std::vector<float> logits, feats;
    target->prefill(ids.ptr<int32_t>(), P, cache, logits, false, &feats);
    Tensor ref_feats = g.tensor(pre + "feats");
    ASSERT_EQ(static_cast<int64_t>(feats.size()), P * T * H);
    const double e_feats = rel_err(feats.data(), ref_feats.ptr<float>(), P * T * H);
    EXPECT_LT(e_feats, kTol) << pre << "feats";

    // Step 1: context = the prompt, block at P.
    DraftCache dcache = dm->new_cache(64);
    std::vector<float> hidden, dl;
    const int32_t anchor = g.tensor(pre + "anchor").ptr<int32_t>()[0];
    auto check_step = [&](const std::string& s, const float* ctx, int64_t n_ctx, int32_t anc) {
      dm->forward(dcache, ctx, n_ctx, anc, k, hidden);
      const double eh = rel_err(hidden.data(), g.tensor(s + "hidden").ptr<float>(), (k + 1) * H);
      dm->logits(hidden.data() + H, k, dl);
      const double el = rel_err(dl.data(), g.tensor(s + "logits").ptr<float>(), k * V);
      EXPECT_LT(eh, c.tol) << s << "hidden";
      EXPECT_LT(el, c.tol) << s << "logits";
      if (!c.exact) return;
      std::printf("%s: hidden err %.2e, logits err %.2e\n", s.c_str(), eh, el);
      Tensor ref_tok = g.tensor(s + "tokens");
      std::vector<int32_t> tok(k);
      if (dc.method == DraftMethod::kDFlash2) {
        DraftModel::Selection sel;
        dm->select(hidden.data() + H, dl.data(), k, anc, 0.f, {}, sel);
        tok = sel.tokens;
        Tensor cand = g.tensor(s + "cand_sorted"), sc = g.tensor(s + "scores_sorted");
        for (int64_t i = 0; i < k * dc.selector_top_k; ++i) EXPECT_EQ(sel.cand[i], cand.ptr<int32_t>()[i]) << s << i;
        const double es = rel_err(sel.scores.data(), sc.ptr<float>(), k * dc.selector_top_k);
        EXPECT_LT(es, kTol) << s << "scores";
      } else {
        for (int64_t i = 0; i < k; ++i) tok[i] = argmax(dl.data() + i * V, V);
      }
      for (int64_t i = 0; i < k; ++i) EXPECT_EQ(tok[i], ref_tok.ptr<int32_t>()[i]) << s << "token " << i;
    };
    check_step(pre, ref_feats.ptr<float>(), P, anchor);
    EXPECT_EQ(dcache.size(), P);

    // Step 2: the target verifies 8 tokens, 3 drafts accepted; the first 4
    // rows' taps enter the draft context, the bonus is the new anchor.
    Tensor vids = g.tensor(pre + "step2.verify_ids");
    std::vector<float> vfeats;
    target->forward_batch({Transformer::SeqChunk{vids.ptr<int32_t>(), 8, &cache, true, &vfeats}}, logits);
    Tensor ref_f2 = g.tensor(pre + "step2.feats");
    EXPECT_LT(rel_err(vfeats.data(), ref_f2.ptr<float>(), 4 * T * H), kTol) << pre << "step2.feats";
    check_step(pre + "step2.", ref_f2.ptr<float>(), 4, g.tensor(pre + "step2.anchor").ptr<int32_t>()[0]);
    EXPECT_EQ(dcache.size(), P + 4);

    if (!c.exact) continue;
    // The whole greedy loop, K = block_size - 1, 24 new tokens.
    SpecConfig sc = test_spec(draft_method_name(dc.method), 0, fixture(D));
    auto prop = test_proposer(sc, *target, 128, c.weights);
    EXPECT_EQ(sc.num_speculative_tokens, 7);
    GenerateOptions go;
    go.max_new_tokens = 24;
    go.stop_at_eos = false;
    std::vector<int32_t> prompt(ids.ptr<int32_t>(), ids.ptr<int32_t>() + P);
    SpecResult r = generate_speculative(*target, *prop, 7, prompt, go);
    Tensor out = g.tensor(pre + "spec_output"), acc = g.tensor(pre + "acceptance_lengths");
    ASSERT_EQ(static_cast<int64_t>(r.gen.tokens.size()), 24);
    for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(r.gen.tokens[i], out.ptr<int32_t>()[P + i]) << pre << i;
    // The reference counts tokens produced per verify pass (bonus included).
    EXPECT_EQ(r.target_passes, acc.numel());
    int64_t produced = 0;
    for (int64_t i = 0; i < acc.numel(); ++i) produced += acc.ptr<int32_t>()[i];
    EXPECT_EQ(produced, 23);  // + the first token from the prefill
    EXPECT_EQ(r.stats.num_accepted_tokens, produced - acc.numel());
  }
}

INSTANTIATE_TEST_SUITE_P(Drafters, DFlashGolden, ::testing::ValuesIn(kCases), [](const auto& info) {
  std::string n = info.param.dir + (info.param.weights ? "_f32" : "");
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

}  // namespace
}  // namespace blockspec
