// GPTQ for DFlash / DFlash2 drafters (quantize/drafter_calibration.h): the calibration rows are the drafter's real
// inputs (the target's taps of the committed tokens through fc, blocks [anchor, MASK...]), the observer hook leaves
// the drafter's numerics unchanged, GPTQ beats RTN layer by layer on those inputs, the GPTQ drafter passes
// check_drafter and keeps speculative decoding lossless, and bad commands fail in one line with no output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "../spec_setup.h"
#include "base/error.h"
#include "kernels/kernel_table.h"
#include "model/dflash.h"
#include "model/dflash_check.h"
#include "model/transformer.h"
#include "model/weight_source.h"
#include "kernels/ops.h"
#include "quantize/calibration.h"
#include "quantize/drafter_calibration.h"
#include "quantize/quantize.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;
const std::string kDir = std::string(BS_SOURCE_DIR) + "/tests/fixtures/dflash/";
const std::string kTarget = kDir + "target";

std::string tmp_dir(const std::string& name) {
  const std::string d =
      (fs::temp_directory_path() / ("bs_drafter_gptq_test_" + std::to_string(getpid()) + "_" + name)).string();
  fs::remove_all(d);
  return d;
}

// 4 windows of 64 tokens of the target's vocabulary (256; 250 / 251 are the fixtures' mask ids).
std::vector<int32_t> calib_ids() {
  std::mt19937 rng(5);
  std::vector<int32_t> ids(256);
  for (int32_t& t : ids) t = static_cast<int32_t>(rng() % 250);
  return ids;
}

QuantizeOptions drafter_options(const std::string& d, bool gptq, const std::string& out) {
  QuantizeOptions o;
  o.in = kDir + d;
  o.out = out;
  o.scheme = QScheme::kW4A16;
  o.gptq = gptq;
  o.target = kTarget;
  o.calib_ids = calib_ids();
  o.calib_window = 64;
  o.progress = false;
  o.n_threads = 1;
  return o;
}

// The hook is an observer: the drafter's block output is bit-identical with and without it, and the rows it hands
// over are what the forward computes with (fc: the taps just appended; q_proj: block rows; k/v: context + block).
TEST(DrafterCalibration, ObserverLeavesNumericsUnchanged) {
  for (const char* d : {"dflash", "dflash2"}) {
    SCOPED_TRACE(d);
    ModelOptions mo;
    mo.n_threads = 1;
    auto target = Transformer::load(kTarget, mo);
    auto draft = DraftModel::load(kDir + d, *target, {});
    target->set_tap_layers(draft->config().target_layer_ids);
    const std::vector<int32_t> ids = {3, 17, 99, 5, 42, 7, 8, 120, 33, 61};
    KvCache kv = target->new_cache(16);
    std::vector<float> logits, taps, h0, h1;
    target->prefill(ids.data(), 10, kv, logits, false, &taps);
    const int64_t B = draft->config().block_size, W = static_cast<int64_t>(taps.size()) / 10;
    DraftCache c0 = draft->new_cache(32), c1 = draft->new_cache(32);
    draft->forward(c0, taps.data(), 6, ids[6], B - 1, h0);
    std::map<std::string, int64_t> rows;
    draft->set_observer([&](const std::vector<std::string>& mods, const float* x, int64_t n, int64_t cols) {
      for (const std::string& m : mods) rows[m] += n;
      if (mods[0] == "fc") {
        EXPECT_EQ(cols, W);
        EXPECT_EQ(std::memcmp(x, taps.data(), n * cols * 4), 0);
      }
    });
    draft->forward(c1, taps.data(), 6, ids[6], B - 1, h1);
    ASSERT_EQ(h0.size(), h1.size());
    EXPECT_EQ(std::memcmp(h0.data(), h1.data(), h0.size() * 4), 0);
    EXPECT_EQ(rows["fc"], 6);
    EXPECT_EQ(rows["layers.0.self_attn.q_proj"], B);
    EXPECT_EQ(rows["layers.0.self_attn.k_proj"], 6 + B);
    EXPECT_EQ(rows["layers.1.self_attn.v_proj"], 6 + B);
    EXPECT_EQ(rows["layers.1.mlp.down_proj"], B);
    EXPECT_EQ(rows.count("layers.0.attention_conv.kernel_projection"), std::string(d) == "dflash2" ? 1u : 0u);
  }
}

void expect_near_h(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::fabs(got[i] - want[i])), ref = std::max(ref, std::fabs(want[i]));
  EXPECT_LE(err, 1e-5 * ref);  // f32 partial sums over other row groupings
}

// Calibration runs blocks as speculative decoding does: every position of a window is an anchor, its context (the
// earlier tokens' taps) enters the draft cache once. fc's H is exactly X^T X of the target's taps of those tokens.
TEST(DrafterCalibration, FcHessianIsTheTargetTaps) {
  const std::vector<int32_t> ids = calib_ids();
  std::vector<std::vector<int32_t>> windows = {{ids.begin(), ids.begin() + 40}, {ids.begin() + 40, ids.begin() + 70}};
  DrafterCalibOptions co;
  co.n_threads = 1;
  const DrafterCalibration dc =
      calibrate_drafter(kDir + "dflash", kTarget, windows, [](const std::string&) { return true; }, co);
  EXPECT_EQ(dc.n_blocks, 39 + 29);
  EXPECT_EQ(dc.rows.at("fc"), 39 + 29);  // tokens 0..T-2 of each window
  EXPECT_EQ(dc.rows.at("layers.2.self_attn.q_proj"), 68 * 8);
  EXPECT_EQ(dc.rows.at("layers.2.self_attn.k_proj"), 68 + 68 * 8);
  EXPECT_EQ(dc.rows.at("layers.0.mlp.up_proj"), 68 * 8);
  EXPECT_EQ(dc.hessians.at("layers.0.mlp.gate_proj"), dc.hessians.at("layers.0.mlp.up_proj"));  // one input, one H

  ModelOptions mo;
  mo.n_threads = 1;
  auto target = Transformer::load(kTarget, mo);
  target->set_tap_layers({1, 2, 3});  // the fixture's default tap rule
  ThreadPool pool(1);
  const KernelTable kt = select_kernels("");
  const OpContext ctx{&kt, &pool};
  std::vector<double> want;
  for (const auto& w : windows) {
    KvCache kv = target->new_cache(64);
    std::vector<float> logits, taps;
    target->prefill(w.data(), static_cast<int64_t>(w.size()), kv, logits, false, &taps);
    accumulate_hessian(ctx, taps.data(), static_cast<int64_t>(w.size()) - 1, 192, want);
  }
  finish_hessian(want, 192);
  expect_near_h(*dc.hessians.at("fc"), want);

  // Layer 0's q_proj reads only the block: input_layernorm of the target's embedding of [token a, MASK x 7] for
  // every anchor a >= 1 of each window (DFlash1 fixture: no conv, input_embedding_scale 1).
  auto dsrc = open_weight_source(kDir + "dflash");
  auto tsrc = open_weight_source(kTarget);
  const Tensor emb = tsrc->load("model.embed_tokens.weight");  // f32 fixture
  std::vector<float> norm(64), x(8 * 64), xn(8 * 64);
  const Tensor nt = dsrc->load("layers.0.input_layernorm.weight");
  ASSERT_EQ(nt.dtype(), DType::kF32);
  std::memcpy(norm.data(), nt.data(), 64 * 4);
  std::vector<double> want_q;
  for (const auto& w : windows)
    for (size_t a = 1; a < w.size(); ++a) {
      std::vector<int32_t> blk(8, 250);
      blk[0] = w[a];
      embedding_lookup(emb, blk.data(), 8, x.data());
      rmsnorm(x.data(), norm.data(), 1e-6f, 8, 64, xn.data());
      accumulate_hessian(ctx, xn.data(), 8, 64, want_q);
    }
  finish_hessian(want_q, 64);
  expect_near_h(*dc.hessians.at("layers.0.self_attn.q_proj"), want_q);
}

// On the drafter's calibration inputs, GPTQ's output error is below RTN's for every quantized linear (fc included),
// each reported with its calibration rows.
TEST(DrafterGptq, BeatsRtnPerLayer) {
  for (const char* d : {"dflash", "dflash2"}) {
    SCOPED_TRACE(d);
    std::map<std::string, double> err[2];
    for (int g = 0; g < 2; ++g) {
      QuantizeOptions o = drafter_options(d, g == 1, tmp_dir(std::string(d) + (g ? "_gptq" : "_rtn")));
      const QuantizeReport r = quantize_model(o);
      EXPECT_EQ(r.calib_tokens, 256);
      EXPECT_EQ(r.calib_blocks, 4 * 63);
      const size_t n_layers = std::string(d) == "dflash" ? 3 : 2;
      EXPECT_EQ(r.layers.size(), 1 + 7 * n_layers);
      for (const LayerReport& l : r.layers) {
        EXPECT_TRUE(l.on_calib) << l.module;
        EXPECT_EQ(l.how.find(g ? "gptq" : "rtn") != std::string::npos, true) << l.module << ": " << l.how;
        const std::string last = l.module.substr(l.module.rfind('.') + 1);
        const int64_t want_rows = last == "fc" ? 4 * 63
                                  : (last == "k_proj" || last == "v_proj") ? 4 * 63 * 9 : 4 * 63 * 8;
        EXPECT_EQ(l.calib_rows, want_rows) << l.module;
        err[g][l.module] = l.rel_err;
      }
      for (const std::string& n : r.notes) EXPECT_EQ(n.find("drafter"), std::string::npos) << n;
      fs::remove_all(o.out);
    }
    double s[2] = {0, 0};
    for (const auto& [m, e] : err[0]) {
      ASSERT_TRUE(err[1].count(m)) << m;
      EXPECT_LT(err[1][m], e) << m << ": gptq " << err[1][m] << " vs rtn " << e;
      s[0] += e, s[1] += err[1][m];
      std::printf("%s %-36s rtn %.5f gptq %.5f\n", d, m.c_str(), e, err[1][m]);
    }
    std::printf("%s mean rtn %.5f gptq %.5f\n", d, s[0] / err[0].size(), s[1] / err[1].size());
    EXPECT_LT(s[1], 0.9 * s[0]);
  }
}

// End to end, on held-out text: the GPTQ drafter's draft logits are closer to the dense drafter's than RTN's.
TEST(DrafterGptq, DraftLogitsCloserThanRtn) {
  ModelOptions mo;
  mo.n_threads = 1;
  auto target = Transformer::load(kTarget, mo);
  std::mt19937 rng(99);  // not the calibration text
  std::vector<int32_t> text(96);
  for (int32_t& t : text) t = static_cast<int32_t>(rng() % 250);
  for (const char* d : {"dflash", "dflash2"}) {
    SCOPED_TRACE(d);
    std::vector<std::string> dirs = {kDir + d};
    for (int g = 0; g < 2; ++g) {
      QuantizeOptions o = drafter_options(d, g == 1, tmp_dir(std::string(d) + (g ? "_e2e_gptq" : "_e2e_rtn")));
      quantize_model(o);
      dirs.push_back(o.out);
    }
    std::vector<std::vector<float>> logits(3);
    std::vector<int64_t> top1(3, 0);
    for (int i = 0; i < 3; ++i) {
      auto dm = DraftModel::load(dirs[i], *target, {});
      target->set_tap_layers(dm->config().target_layer_ids);
      KvCache kv = target->new_cache(96);
      std::vector<float> lg, taps, hidden, out;
      target->prefill(text.data(), 96, kv, lg, false, &taps);
      DraftCache cache = dm->new_cache(128);
      const int64_t W = static_cast<int64_t>(taps.size()) / 96;
      for (int64_t a = 1, seen = 0; a < 96; seen = a, a += 5) {
        dm->forward(cache, taps.data() + seen * W, a - seen, text[a], 7, hidden);
        dm->logits(hidden.data() + 64, 7, out);
        logits[i].insert(logits[i].end(), out.begin(), out.end());
      }
    }
    const int64_t V = 256, rows = static_cast<int64_t>(logits[0].size()) / V;
    double den = 0, num[2] = {0, 0};
    int64_t agree[2] = {0, 0};
    for (int64_t r = 0; r < rows; ++r) {
      const float* z = logits[0].data() + r * V;
      const int64_t want = std::max_element(z, z + V) - z;
      for (int64_t v = 0; v < V; ++v) den += double(z[v]) * z[v];
      for (int g = 0; g < 2; ++g) {
        const float* q = logits[1 + g].data() + r * V;
        for (int64_t v = 0; v < V; ++v) num[g] += double(q[v] - z[v]) * (q[v] - z[v]);
        agree[g] += (std::max_element(q, q + V) - q) == want;
      }
    }
    const double e_rtn = std::sqrt(num[0] / den), e_gptq = std::sqrt(num[1] / den);
    std::printf("%s held-out draft logits: rel. error rtn %.5f gptq %.5f; top-1 = dense rtn %.3f gptq %.3f (%lld slots)\n",
                d, e_rtn, e_gptq, double(agree[0]) / rows, double(agree[1]) / rows, static_cast<long long>(rows));
    EXPECT_LT(e_gptq, e_rtn);
    for (size_t i = 1; i < dirs.size(); ++i) fs::remove_all(dirs[i]);
  }
}

// The GPTQ drafter is complete for `blockspec check` against its target, and speculative decoding with it is
// lossless: greedy output equals plain greedy decoding of the target.
TEST(DrafterGptq, PassesCheckAndStaysLossless) {
  ModelOptions mo;
  mo.n_threads = 1;
  auto target = Transformer::load(kTarget, mo);
  const std::vector<std::vector<int32_t>> prompts = {{3, 17, 99, 5, 42}, {200, 1, 1, 9, 64, 130, 7, 7, 88, 12, 5}};
  for (const char* d : {"dflash", "dflash2"}) {
    SCOPED_TRACE(d);
    QuantizeOptions o = drafter_options(d, true, tmp_dir(std::string(d) + "_lossless"));
    quantize_model(o);
    DraftCheckInfo info;
    const auto problems = check_drafter(o.out, &target->config(), &info);
    for (const auto& p : problems) ADD_FAILURE() << p.name << ": " << p.message;
    EXPECT_TRUE(info.target_checked);
    for (const auto& p : prompts) {
      GenerateOptions go;
      go.max_new_tokens = 24, go.stop_at_eos = false;
      const GenerateResult plain = generate(*target, p, go);
      SpecConfig sc = test_spec(d, 0, o.out);
      auto prop = test_proposer(sc, *target, 256);
      const SpecResult spec = generate_speculative(*target, *prop, sc.num_speculative_tokens, p, go);
      EXPECT_EQ(spec.gen.tokens, plain.tokens);
      EXPECT_GT(spec.stats.num_draft_tokens, 0);
    }
    fs::remove_all(o.out);
  }
}

// Bad commands: one line, nothing written.
TEST(DrafterGptq, BadInputFailsInOneLine) {
  auto expect_error = [](QuantizeOptions o, const std::string& needle) {
    SCOPED_TRACE(needle);
    try {
      quantize_model(o);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
    EXPECT_FALSE(fs::exists(o.out)) << o.out;
  };
  QuantizeOptions o = drafter_options("dflash", true, tmp_dir("bad"));
  o.target.clear();
  expect_error(o, "--target");
  o = drafter_options("dflash2", true, tmp_dir("bad"));
  o.target = std::string(BS_SOURCE_DIR) + "/tests/fixtures/quantize/input-h128";  // hidden 128, the drafter's 64
  expect_error(o, "hidden");
  o = drafter_options("dflash", true, tmp_dir("bad"));
  o.target = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";  // 3 layers: tap 3 out of range
  expect_error(o, "does not fit --target");
  o = drafter_options("dflash", false, tmp_dir("bad"));
  o.in = kTarget;  // a target with --target
  expect_error(o, "--target");
}

}  // namespace
}  // namespace blockspec
