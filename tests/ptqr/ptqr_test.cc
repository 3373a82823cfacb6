// PTQR (issue 18): the student's rounding and dither, the straight-through
// twin against the serving layer, learning, and the proof that the student
// IS the serving model: after `run_ptqr` on a tiny Qwen2 (q/k/v biases) with
// an int8_block_g128 KV cache, the checkpoint it wrote holds the student's
// final codes and scales byte for byte, and `generate`'s model loaded from it
// (Transformer::load) reproduces the student's residual stream and logits bit
// for bit on the calibration windows. Resume after a stop gives the same
// checkpoint as an uninterrupted run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "base/mapped_file.h"
#include "formats/safetensors.h"
#include "kernels/kernel_table.h"
#include "kernels/quant.h"
#include "kernels/quant_import.h"
#include "model/transformer.h"
#include "ptqr/ptqr.h"
#include "ptqr/ptqr_layer.h"
#include "runtime/sampler.h"

namespace fs = std::filesystem;

namespace blockspec {
namespace {

const std::string kQwen2 = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen2-tiny-f32";
const std::string kQwen3 = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-f32";

QuantSpec w8_spec() {
  QuantSpec s;
  s.scheme = QScheme::kW8A8, s.bits = 8, s.group = 128, s.scale_dtype = DType::kF32;
  return s;
}

StudentGroup random_group(int64_t N, int64_t K, uint64_t seed) {
  StudentGroup g;
  g.K = K, g.N = N;
  StudentPart p;
  p.module = "m";
  p.N = N;
  Rng r(seed);
  p.w.resize(N * K);
  for (float& v : p.w) v = static_cast<float>(r.uniform() - 0.5);
  g.parts.push_back(std::move(p));
  return g;
}

TEST(PtqrDither, ScheduleIsGeometricAndEndsAtExactlyZero) {
  PtqrOptions o;
  o.steps = 100, o.dither_start = 1.0;
  EXPECT_EQ(dither_sigma(o, 0), 1.0);
  EXPECT_NEAR(dither_sigma(o, 40), std::sqrt(1e-3), 1e-9);  // halfway to 1e-3 on a log scale
  EXPECT_NEAR(dither_sigma(o, 79) / dither_sigma(o, 78), std::pow(1e-3, 1.0 / 80), 1e-12);
  for (int64_t t = 80; t < 100; ++t) EXPECT_EQ(dither_sigma(o, t), 0.0) << t;
  o.dither_decay = 0.5;
  EXPECT_EQ(dither_sigma(o, 3), 0.125);
  EXPECT_EQ(dither_sigma(o, 10), 0.0);  // 2^-10 < 1e-3
  o.dither_start = 0;
  EXPECT_EQ(dither_sigma(o, 0), 0.0);
}

TEST(PtqrStudent, SigmaZeroIsTheWritersRoundingAndServingDequantizesToIt) {
  StudentGroup g = random_group(70, 300, 1);  // partial last group, rows not a multiple of the tile
  ThreadPool pool(2);
  requantize(g, w8_spec(), 0.0, 7, pool);
  QuantWeight ref = make_params(w8_spec(), g.parts[0].w.data(), 70, 300);
  quantize_rtn(ref, g.parts[0].w.data());
  EXPECT_EQ(g.parts[0].qw.q, ref.q);
  EXPECT_EQ(g.parts[0].qw.scale, ref.scale);
  const KernelTable kt = select_kernels("");
  const OpContext ctx{&kt, &pool};
  const Tensor d = dequantize_weight(serving_weight(ctx, g));
  ASSERT_EQ(d.numel(), 70 * 300);
  for (int64_t i = 0; i < 70 * 300; ++i) ASSERT_EQ(d.ptr<float>()[i], g.deq[i]) << i;
}

TEST(PtqrStudent, DitherMovesOnlyDecisionsNearTheMidpointAndIgnoresThreads) {
  StudentGroup g = random_group(64, 256, 2), g1 = random_group(64, 256, 2);
  ThreadPool pool(2), one(1);
  const double sigma = 0.3;
  requantize(g, w8_spec(), sigma, 99, pool);
  requantize(g1, w8_spec(), sigma, 99, one);
  EXPECT_EQ(g.parts[0].qw.q, g1.parts[0].qw.q);
  QuantWeight rne = make_params(w8_spec(), g.parts[0].w.data(), 64, 256);
  quantize_rtn(rne, g.parts[0].w.data());
  int64_t moved = 0;
  for (int64_t n = 0; n < 64; ++n)
    for (int64_t k = 0; k < 256; ++k) {
      const int8_t a = g.parts[0].qw.q[n * 256 + k], b = rne.q[n * 256 + k];
      if (a == b) continue;
      ++moved;
      const double u = g.parts[0].w[n * 256 + k] / rne.group_scale(n, k / 128);
      const double frac = u - std::floor(u);
      EXPECT_LT(std::fabs(frac - 0.5), sigma / 2 + 1e-6) << n << "," << k << " u " << u;
      EXPECT_EQ(std::abs(a - b), 1);
    }
  // A decision at distance d < sigma / 2 from the midpoint moves with probability (sigma / 2 - d) / sigma:
  // a fraction sigma / 4 of uniformly spread decisions move (here 0.075 of 16384, ~1229).
  EXPECT_GT(moved, 64 * 256 * sigma / 4 * 0.8);
  EXPECT_LT(moved, 64 * 256 * sigma / 4 * 1.2);
}

struct Tiny {
  std::unique_ptr<WeightSource> src = nullptr;
  RopeTables rope;
  ThreadPool pool{2};
  KernelTable kt = select_kernels("");
  OpContext ctx{&kt, &pool};
  explicit Tiny(const std::string& path) : src(open_weight_source(path)), rope(compute_rope(src->config())) {}
  std::vector<float> embed(int64_t T, uint64_t seed) {
    const int64_t H = src->config().hidden_size;
    std::vector<float> x(T * H);
    Rng r(seed);
    for (float& v : x) v = static_cast<float>(2 * r.uniform() - 1);
    return x;
  }
};

// The twin and the serving layer compute the same function (f32 summation order apart).
TEST(PtqrLayer, TwinFollowsTheServingLayer) {
  for (const std::string& path : {kQwen2, kQwen3})
    for (KvDType kv : {KvDType::kF32, KvDType::kInt8BlockG128})
      for (QScheme scheme : {QScheme::kW8A8, QScheme::kW4A16}) {
      Tiny t(path);
      const QuantSpec spec = ptqr_spec(*t.src, 128, scheme);
      PtqrLayer l(t.ctx, t.src->config(), t.rope, *t.src, *t.src, 1, spec, kv);
      l.requantize(0.0, 0);
      const int64_t T = 24, H = t.src->config().hidden_size;
      const std::vector<float> x = t.embed(T, 5);
      std::vector<float> y(T * H), y2(T * H);
      l.serving_loss(T, x.data(), x.data(), T, y.data());
      QatSaved s;
      qat_forward(t.ctx, l.twin(), x.data(), T, y2.data(), s);
      double d = 0, m = 0;
      for (int64_t i = 0; i < T * H; ++i) d = std::max(d, double(std::fabs(y[i] - y2[i]))), m = std::max(m, double(std::fabs(y[i])));
      EXPECT_LT(d / m, 1e-4) << path << " " << kv_dtype_name(kv) << " " << qscheme_name(scheme);
      }
}

TEST(PtqrLayer, TrainingLowersTheServingLoss) {
  Tiny t(kQwen2);
  const ModelConfig& c = t.src->config();
  PtqrLayer l(t.ctx, c, t.rope, *t.src, *t.src, 0, ptqr_spec(*t.src, 128), KvDType::kInt8BlockG128);
  const int64_t T = 32, H = c.hidden_size;
  std::vector<float> x = t.embed(2 * T, 11), y = x;
  l.run_teacher(T, y.data(), 2 * T);
  l.requantize(0.0, 0);
  const double before = l.serving_loss(T, x.data(), y.data(), 2 * T, nullptr);
  AdamWOptions ao;
  ao.weight_decay = 0;
  for (int64_t s = 0; s < 40; ++s) {
    l.requantize(0.0, 0);
    l.train_step(T, x.data() + (s % 2) * T * H, y.data() + (s % 2) * T * H, 2e-4, s + 1, ao);
  }
  l.requantize(0.0, 0);
  const double after = l.serving_loss(T, x.data(), y.data(), 2 * T, nullptr);
  std::printf("[ measured ] layer loss RTN %.4g -> %.4g after 40 steps\n", before, after);
  EXPECT_GT(before, 0);
  EXPECT_LT(after, 0.7 * before);
}

// masters() / set_masters(): setting back the start's masters after training serves the start's codes again.
TEST(PtqrLayer, SetMastersRestoresTheServedCodes) {
  Tiny t(kQwen2);
  const ModelConfig& c = t.src->config();
  PtqrLayer l(t.ctx, c, t.rope, *t.src, *t.src, 0, ptqr_spec(*t.src, 128), KvDType::kInt8BlockG128, true);
  const int64_t T = 32;
  std::vector<float> x = t.embed(T, 12), y = x;
  l.run_teacher(T, y.data(), T);
  l.requantize(0.0, 0);
  const double before = l.serving_loss(T, x.data(), y.data(), T, nullptr);
  const auto start = l.masters();
  const auto start_codes = l.export_codes();
  const auto start_vectors = l.export_vectors();
  AdamWOptions ao;
  for (int64_t s = 0; s < 5; ++s) l.train_step(T, x.data(), y.data(), 1e-3, s + 1, ao, 1e-3);
  l.requantize(0.0, 0);
  ASSERT_NE(l.serving_loss(T, x.data(), y.data(), T, nullptr), before);
  l.set_masters(start);
  l.requantize(0.0, 0);
  EXPECT_EQ(l.serving_loss(T, x.data(), y.data(), T, nullptr), before);
  const auto codes = l.export_codes();
  ASSERT_EQ(codes.size(), start_codes.size());
  for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(std::get<1>(codes[i]).q, std::get<1>(start_codes[i]).q);
  EXPECT_EQ(l.export_vectors(), start_vectors);  // the trained norms and biases go back too
  auto wrong = start;
  wrong.pop_back();
  EXPECT_THROW(l.set_masters(wrong), Error);
}

std::vector<int32_t> calib_ids(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(n);
  Rng r(3);
  for (int32_t& v : ids) v = static_cast<int32_t>(r.next() % vocab);
  return ids;
}

PtqrOptions tiny_options(const std::string& out) {
  PtqrOptions o;
  o.in = kQwen2;
  o.out = out;
  o.kv = KvDType::kInt8BlockG128;
  o.window = 16;
  o.calib_ids = calib_ids(4 * 16, 500);
  o.steps = 12;
  o.lr = 2e-4;
  o.dither_start = 0.5;
  o.n_threads = 2;
  o.progress = false;
  o.keep_outputs = true;
  return o;
}

// The written checkpoint is the student: codes byte for byte, and the engine's forward on it equals the student's;
// with SmoothQuant (--smooth) too, whose smoothed norms the checkpoint then carries.
// The weight-only schemes (W4A16, W8A16) too: int4 / int8 codes, f32 activations.
class PtqrRunSmooth : public ::testing::TestWithParam<std::tuple<double, bool, double, bool, QScheme>> {};

TEST_P(PtqrRunSmooth, CheckpointIsTheStudentBitForBit) {
  const std::string out = testing::TempDir() + "/ptqr_bit";
  fs::remove_all(out);
  PtqrOptions o = tiny_options(out);
  o.smooth = std::get<0>(GetParam());
  o.train_vectors = std::get<1>(GetParam());
  o.smooth_attention = std::get<2>(GetParam());
  o.smooth_mappings = std::get<3>(GetParam()) ? SmoothMappings::kAll : SmoothMappings::kSmoothQuant;
  o.scheme = std::get<4>(GetParam());
  o.lr_vectors = 1e-3;
  const PtqrReport r = run_ptqr(o);
  ASSERT_EQ(r.layers.size(), 2u);
  ASSERT_EQ(r.codes.size(), 14u);
  EXPECT_FALSE(fs::exists(out + ".ptqr-state"));
  const std::unique_ptr<WeightSource> ck = open_weight_source(out);
  for (const auto& [m, qw] : r.codes) {
    ASSERT_TRUE(ck->has_native(m + ".weight")) << m;
    EXPECT_EQ(ck->native_act_int8(m + ".weight"), o.scheme == QScheme::kW8A8) << m;
    EXPECT_EQ(qw.spec.bits, o.scheme == QScheme::kW4A16 ? 4 : 8) << m;
    std::vector<int8_t> codes(qw.N * qw.K);
    std::vector<float> scales(qw.N * qw.n_groups);
    ck->load_native(m + ".weight", 0, qw.N, codes.data(), scales.data());
    EXPECT_EQ(codes, qw.q) << m;
    EXPECT_EQ(scales, qw.scale) << m;
  }
  // The engine on the checkpoint, each window a fresh sequence with the same KV dtype.
  ModelOptions mo;
  mo.n_threads = 2;
  mo.kv_cache_dtype = KvDType::kInt8BlockG128;
  auto tf = Transformer::load(out, mo);
  const ModelConfig& c = tf->config();
  const int64_t H = c.hidden_size, V = c.vocab_size, T = o.window;
  tf->set_tap_layers({c.n_layers - 1});  // the final-normed state after the last layer
  ThreadPool pool(2);
  const KernelTable kt = select_kernels(tf->isa());
  const OpContext ctx{&kt, &pool};
  int64_t mismatched_stream = 0, mismatched_logits = 0;
  for (int64_t w = 0; w < 4; ++w) {
    KvCache cache = tf->new_cache(T);
    std::vector<float> logits, taps;
    std::vector<Transformer::SeqChunk> chunk = {{o.calib_ids.data() + w * T, T, &cache, true, &taps}};
    tf->forward_batch(chunk, logits);
    ASSERT_EQ(taps.size(), static_cast<size_t>(T * H));
    std::vector<float> normed(T * H), lg(T * V);
    rmsnorm(r.stream.data() + w * T * H, tf->weights().out_norm.ptr<float>(), static_cast<float>(c.rms_norm_eps), T, H,
            normed.data());
    linear(ctx, normed.data(), tf->weights().lm_head, nullptr, lg.data(), T);
    for (int64_t i = 0; i < T * H; ++i) mismatched_stream += normed[i] != taps[i];
    for (int64_t i = 0; i < T * V; ++i) mismatched_logits += lg[i] != logits[i];
  }
  EXPECT_EQ(mismatched_stream, 0);
  EXPECT_EQ(mismatched_logits, 0);
  // Training changed codes: not an RTN export in disguise.
  const PtqrReport& rr = r;
  double gain = 0;
  for (const PtqrLayerReport& l : rr.layers) gain += l.loss_rtn - l.loss_final;
  EXPECT_GT(gain, 0);
  // Audit: what is neither retrained nor smoothed is the input's, byte for byte.
  {
    const std::unique_ptr<WeightSource> in = open_weight_source(o.in);
    for (const char* n : {"model.embed_tokens.weight", "model.norm.weight", "model.layers.1.self_attn.q_proj.bias"}) {
      if ((o.train_vectors || o.smooth_attention > 0) && std::string(n).find(".bias") != std::string::npos) continue;
      const Tensor a = in->load(n), b = ck->load(n);
      ASSERT_EQ(a.nbytes(), b.nbytes()) << n;
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << n;
    }
    EXPECT_GT(r.n_copied, 0);
    EXPECT_EQ(r.replaced.empty(), o.smooth == 0 && !o.train_vectors && o.smooth_attention == 0);
  }
  if (o.train_vectors || o.smooth_attention > 0) {  // trained or rescaled biases are the checkpoint's (and moved)
    const std::unique_ptr<WeightSource> in = open_weight_source(o.in);
    const Tensor a = in->load("model.layers.0.self_attn.k_proj.bias"), b = ck->load("model.layers.0.self_attn.k_proj.bias");
    EXPECT_NE(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
  }
  if (o.smooth > 0 || o.train_vectors) {  // the checkpoint's norms are not the input's
    const std::unique_ptr<WeightSource> in = open_weight_source(o.in);
    const Tensor a = in->load("model.layers.0.input_layernorm.weight"), b = ck->load("model.layers.0.input_layernorm.weight");
    EXPECT_NE(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
  }
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Smooth, PtqrRunSmooth,
                         ::testing::Values(std::make_tuple(0.0, false, 0.0, false, QScheme::kW8A8),
                                           std::make_tuple(0.5, false, 0.0, false, QScheme::kW8A8),
                                           std::make_tuple(0.0, true, 0.0, false, QScheme::kW8A8),
                                           std::make_tuple(0.5, true, 0.0, false, QScheme::kW8A8),
                                           std::make_tuple(0.5, false, 0.5, false, QScheme::kW8A8),
                                           std::make_tuple(0.5, false, 0.5, true, QScheme::kW8A8),
                                           std::make_tuple(0.0, false, 0.0, false, QScheme::kW4A16),
                                           std::make_tuple(0.0, true, 0.0, false, QScheme::kW8A16)));

TEST(PtqrRun, ResumeAfterAStopGivesTheSameCheckpoint) {
  const std::string a = testing::TempDir() + "/ptqr_a", b = testing::TempDir() + "/ptqr_b";
  fs::remove_all(a), fs::remove_all(b), fs::remove_all(b + ".ptqr-state");
  const PtqrReport ra = run_ptqr(tiny_options(a));
  PtqrOptions ob = tiny_options(b);
  ob.stop_after_layers = 1;
  const PtqrReport r1 = run_ptqr(ob);
  EXPECT_TRUE(r1.stopped);
  EXPECT_TRUE(fs::exists(b + ".ptqr-state/meta.json"));
  EXPECT_FALSE(fs::exists(b + "/model.safetensors"));
  ob.stop_after_layers = -1;
  ob.resume = true;
  const PtqrReport r2 = run_ptqr(ob);
  EXPECT_EQ(r2.resumed_from, 1);
  EXPECT_EQ(r2.codes.size(), ra.codes.size());
  for (const auto& [m, qw] : ra.codes) {
    EXPECT_EQ(r2.codes.at(m).q, qw.q) << m;
    EXPECT_EQ(r2.codes.at(m).scale, qw.scale) << m;
  }
  EXPECT_EQ(r2.stream, ra.stream);
  // A resume with other settings is refused, naming the state.
  PtqrOptions oc = tiny_options(b);
  oc.stop_after_layers = 1;
  fs::remove_all(b);
  run_ptqr(oc);
  oc.resume = true, oc.stop_after_layers = -1, oc.steps = 13;
  try {
    run_ptqr(oc);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another ptqr command"), std::string::npos) << e.what();
  }
  fs::remove_all(a), fs::remove_all(b), fs::remove_all(b + ".ptqr-state");
}

// --holdout: the held-out windows never train, and each layer keeps the step scoring lowest on them.
TEST(PtqrRun, HoldoutWindowsNeverTrainAndTheBestStepIsKept) {
  const std::string a = testing::TempDir() + "/ptqr_ho_a", b = testing::TempDir() + "/ptqr_ho_b";
  // Scored only at the end (val_every = steps) with 8 training windows of random tokens: the kept step is the last
  // (measured: held-out 0.0010655 -> 0.0010532, 0.0026974 -> 0.0026543; with 4 or 16 windows, or a lower rate,
  // training makes the held-out window worse and the start is kept), and the codes are those of a run on the
  // training windows alone -- training on the held-out window would change them.
  PtqrOptions oa = tiny_options(a);
  oa.calib_ids = calib_ids(9 * 16, 500);
  oa.holdout = 1, oa.val_every = oa.steps;
  const PtqrReport ra = run_ptqr(oa);
  PtqrOptions ob = tiny_options(b);
  ob.calib_ids.assign(oa.calib_ids.begin(), oa.calib_ids.begin() + 8 * 16);
  const PtqrReport rb = run_ptqr(ob);
  ASSERT_EQ(ra.layers.size(), 2u);
  for (const PtqrLayerReport& l : ra.layers) {
    std::printf("[ measured ] layer %lld held-out %.5g -> %.5g (kept step %lld)\n", static_cast<long long>(l.layer),
                l.val_rtn, l.val_final, static_cast<long long>(l.kept_step));
    EXPECT_EQ(l.kept_step, oa.steps);
    EXPECT_LT(l.val_final, l.val_rtn);
  }
  for (const auto& [m, qw] : rb.codes) EXPECT_EQ(ra.codes.at(m).q, qw.q) << m;
  for (const PtqrLayerReport& l : rb.layers) EXPECT_EQ(l.kept_step, -1);
  // A rate that wrecks the layer: every layer keeps its start, the RTN codes, bit for bit.
  PtqrOptions oc = tiny_options(a);
  oc.calib_ids = oa.calib_ids;
  oc.holdout = 1, oc.val_every = 3, oc.lr = 0.5;
  const PtqrReport rc = run_ptqr(oc);
  PtqrOptions od = oc;
  od.steps = 1, od.lr = 1e-30, od.holdout = 0, od.out = b;  // RTN of the same start
  const PtqrReport rd = run_ptqr(od);
  for (const PtqrLayerReport& l : rc.layers) {
    EXPECT_EQ(l.kept_step, 0);
    EXPECT_EQ(l.val_final, l.val_rtn);
    EXPECT_EQ(l.loss_final, l.loss_rtn);
  }
  for (const auto& [m, qw] : rd.codes) EXPECT_EQ(rc.codes.at(m).q, qw.q) << m;
  fs::remove_all(a), fs::remove_all(b);
}

// --smooth-tokens: SmoothQuant's statistics come from the first windows only.
TEST(PtqrRun, SmoothTokensLimitTheSmoothingStatistics) {
  const std::string a = testing::TempDir() + "/ptqr_st_a", b = testing::TempDir() + "/ptqr_st_b";
  auto norm = [](const std::string& dir) {
    const Tensor t = open_weight_source(dir)->load("model.layers.1.input_layernorm.weight");
    return std::vector<uint8_t>(static_cast<const uint8_t*>(t.data()), static_cast<const uint8_t*>(t.data()) + t.nbytes());
  };
  PtqrOptions o = tiny_options(a);
  o.smooth = 0.5, o.steps = 2, o.keep_outputs = false;
  o.smooth_tokens = 20;  // whole windows: the first two
  run_ptqr(o);
  const auto limited = norm(a);
  PtqrOptions one = o;
  one.out = b, one.smooth_tokens = -1;
  one.calib_ids.resize(2 * 16);
  run_ptqr(one);
  EXPECT_EQ(norm(b), limited);
  PtqrOptions all = o;
  all.out = b, all.smooth_tokens = -1;
  fs::remove_all(b);
  run_ptqr(all);
  EXPECT_NE(norm(b), limited);
  fs::remove_all(a), fs::remove_all(b);
}

// With --smooth and --smooth-attention the state keeps their statistics: a resume smooths from them (same
// checkpoint as uninterrupted) instead of measuring again (other statistics in the state change the result).
TEST(PtqrRun, ResumeSmoothsFromTheKeptStatistics) {
  const std::string a = testing::TempDir() + "/ptqr_ss_a", b = testing::TempDir() + "/ptqr_ss_b";
  fs::remove_all(a), fs::remove_all(b), fs::remove_all(b + ".ptqr-state");
  PtqrOptions oa = tiny_options(a);
  oa.smooth = 0.5, oa.smooth_attention = 0.5, oa.smooth_mappings = SmoothMappings::kAll;
  const PtqrReport ra = run_ptqr(oa);
  PtqrOptions ob = oa;
  ob.out = b, ob.stop_after_layers = 1;
  run_ptqr(ob);
  const std::string stats = b + ".ptqr-state/smooth_stats.safetensors";
  ASSERT_TRUE(fs::exists(stats));
  const std::string saved = b + "-stats.safetensors";
  fs::copy_file(stats, saved, fs::copy_options::overwrite_existing);
  ob.stop_after_layers = -1, ob.resume = true;
  const PtqrReport rb = run_ptqr(ob);
  for (const auto& [m, qw] : ra.codes) EXPECT_EQ(rb.codes.at(m).q, qw.q) << m;
  EXPECT_EQ(rb.stream, ra.stream);
  // The same resume with every kept activation range doubled: the smoothing, so the export, differs.
  fs::remove_all(b);
  ob.stop_after_layers = 1, ob.resume = false;
  run_ptqr(ob);
  {
    const SafetensorsCheckpoint f(saved);
    std::vector<std::pair<std::string, Tensor>> t;
    for (const std::string& n : f.names()) {
      Tensor x = f.tensor(n);
      Tensor y(DType::kF32, {x.numel()});
      for (int64_t i = 0; i < x.numel(); ++i) y.mutable_ptr<float>()[i] = 2 * x.ptr<float>()[i];
      t.emplace_back(n, y);
    }
    write_safetensors(stats, t);
  }
  ob.stop_after_layers = -1, ob.resume = true;
  run_ptqr(ob);
  const Tensor na = open_weight_source(a)->load("model.layers.1.post_attention_layernorm.weight"),
               nb = open_weight_source(b)->load("model.layers.1.post_attention_layernorm.weight");
  EXPECT_NE(std::memcmp(na.data(), nb.data(), na.nbytes()), 0);
  fs::remove_all(a), fs::remove_all(b), fs::remove(saved);
}

// --smooth-search: each layer starts from the candidate alpha whose RTN start scores lowest; one candidate is
// exactly --smooth with that alpha; a resume re-applies the finished layers' picks.
TEST(PtqrRun, SmoothSearchPicksEachLayersStart) {
  const std::string a = testing::TempDir() + "/ptqr_sr_a", b = testing::TempDir() + "/ptqr_sr_b";
  fs::remove_all(a), fs::remove_all(b), fs::remove_all(b + ".ptqr-state");
  auto norm = [](const std::string& dir, int layer) {
    const Tensor t = open_weight_source(dir)->load("model.layers." + std::to_string(layer) + ".input_layernorm.weight");
    return std::vector<uint8_t>(static_cast<const uint8_t*>(t.data()), static_cast<const uint8_t*>(t.data()) + t.nbytes());
  };
  PtqrOptions o = tiny_options(a);
  o.smooth = 0.5, o.smooth_mappings = SmoothMappings::kAll;
  o.smooth_search = {0.2, 0.9};
  const PtqrReport r = run_ptqr(o);
  std::vector<double> layer0;  // layer 0's RTN loss with each alpha alone (its input does not depend on the picks)
  for (double alpha : o.smooth_search) {
    PtqrOptions x = tiny_options(b);
    x.smooth = alpha, x.smooth_mappings = SmoothMappings::kAll, x.steps = 1;
    layer0.push_back(run_ptqr(x).layers.at(0).loss_rtn);
    fs::remove_all(b);
  }
  ASSERT_EQ(r.layers.size(), 2u);
  for (const PtqrLayerReport& l : r.layers) {
    ASSERT_EQ(l.smooth_scores.size(), 2u);
    std::printf("[ measured ] layer %lld alpha 0.2: %.6g, 0.9: %.6g -> picked %s\n", static_cast<long long>(l.layer),
                l.smooth_scores[0].second, l.smooth_scores[1].second, l.smooth_alphas.describe().c_str());
    const auto best = std::min_element(l.smooth_scores.begin(), l.smooth_scores.end(),
                                       [](const auto& x, const auto& y) { return x.second < y.second; });
    EXPECT_EQ(l.smooth_alphas, best->first);
    EXPECT_EQ(l.loss_rtn, best->second) << "the 4 windows are all scored: the RTN start is the picked candidate";
  }
  EXPECT_EQ(r.layers[0].smooth_scores[0].second, layer0[0]);
  EXPECT_EQ(r.layers[0].smooth_scores[1].second, layer0[1]);
  // One candidate: exactly --smooth with it.
  PtqrOptions one = tiny_options(b);
  one.smooth = 0.5, one.smooth_mappings = SmoothMappings::kAll, one.smooth_search = {0.3};
  const PtqrReport r1 = run_ptqr(one);
  const auto n1 = norm(b, 1);
  fs::remove_all(b);
  PtqrOptions plain = tiny_options(b);
  plain.smooth = 0.3, plain.smooth_mappings = SmoothMappings::kAll;
  const PtqrReport rp = run_ptqr(plain);
  for (const auto& [m, qw] : rp.codes) EXPECT_EQ(r1.codes.at(m).q, qw.q) << m;
  EXPECT_EQ(norm(b, 1), n1);
  fs::remove_all(b);
  // Stop after layer 1 and resume: the same checkpoint, layer 0's pick (not 0.5) re-applied.
  PtqrOptions rs = o;
  rs.out = b, rs.stop_after_layers = 1;
  run_ptqr(rs);
  rs.stop_after_layers = -1, rs.resume = true;
  const PtqrReport rr = run_ptqr(rs);
  EXPECT_EQ(rr.layers.at(0).smooth_alphas, r.layers[0].smooth_alphas);
  EXPECT_EQ(norm(b, 0), norm(a, 0));
  for (const auto& [m, qw] : r.codes) EXPECT_EQ(rr.codes.at(m).q, qw.q) << m;
  fs::remove_all(a), fs::remove_all(b), fs::remove_all(b + ".ptqr-state");
}

// --smooth-search-mappings: after the uniform grid, each mapping's alpha in turn (the others at the best so far):
// 2 uniform + 4 mappings x 1 other alpha candidates, the best of all of them wins and is the start; layer 0's scores
// equal what the same alphas score alone; a resume re-applies the per-mapping picks.
TEST(PtqrRun, SmoothSearchMappingsRefinesEachMapping) {
  const std::string a = testing::TempDir() + "/ptqr_sm_a", b = testing::TempDir() + "/ptqr_sm_b";
  fs::remove_all(a), fs::remove_all(b), fs::remove_all(b + ".ptqr-state");
  PtqrOptions o = tiny_options(a);
  o.smooth = 0.5, o.smooth_mappings = SmoothMappings::kAll;
  o.smooth_search = {0.2, 0.9};
  o.smooth_search_mappings = true;
  const PtqrReport r = run_ptqr(o);
  ASSERT_EQ(r.layers.size(), 2u);
  bool any_mixed = false;
  for (const PtqrLayerReport& l : r.layers) {
    ASSERT_EQ(l.smooth_scores.size(), 6u);
    const auto best = std::min_element(l.smooth_scores.begin(), l.smooth_scores.end(),
                                       [](const auto& x, const auto& y) { return x.second < y.second; });
    EXPECT_EQ(l.smooth_alphas, best->first);
    EXPECT_EQ(l.loss_rtn, best->second);
    EXPECT_LE(l.loss_rtn, std::min(l.smooth_scores[0].second, l.smooth_scores[1].second));
    for (size_t i = 2; i < 6; ++i) {  // one mapping differs from the best uniform alpha's
      const SmoothAlphas u = l.smooth_scores[0].second <= l.smooth_scores[1].second ? l.smooth_scores[0].first
                                                                                    : l.smooth_scores[1].first;
      const auto c = l.smooth_scores[i].first.values(), uv = u.values();
      int diff = 0;
      for (int k = 0; k < 4; ++k) diff += c[k] != uv[k];
      EXPECT_GE(diff, 1) << "candidate " << i;
    }
    any_mixed |= l.smooth_alphas.describe().find('/') != std::string::npos;
    std::printf("[ measured ] layer %lld picked %s, RTN loss %.6g (best uniform %.6g)\n", static_cast<long long>(l.layer),
                l.smooth_alphas.describe().c_str(), l.loss_rtn,
                std::min(l.smooth_scores[0].second, l.smooth_scores[1].second));
  }
  // Stop after layer 1 and resume: layer 0's per-mapping picks are re-applied (its norms and v bias come from them),
  // so the checkpoint is the uninterrupted run's byte for byte.
  PtqrOptions rs = o;
  rs.out = b, rs.stop_after_layers = 1;
  run_ptqr(rs);
  rs.stop_after_layers = -1, rs.resume = true;
  const PtqrReport rr = run_ptqr(rs);
  EXPECT_EQ(rr.layers.at(0).smooth_alphas, r.layers[0].smooth_alphas);
  EXPECT_EQ(rr.layers.at(0).smooth_scores, r.layers[0].smooth_scores);
  for (const auto& [m, qw] : r.codes) EXPECT_EQ(rr.codes.at(m).q, qw.q) << m;
  EXPECT_EQ(read_text_file(a + "/model.safetensors"), read_text_file(b + "/model.safetensors"));
  std::printf("[ measured ] a layer picked per-mapping alphas: %s\n", any_mixed ? "yes" : "no");
  fs::remove_all(a), fs::remove_all(b), fs::remove_all(b + ".ptqr-state");
}

TEST(PtqrRun, BadOptionsAreOneLineErrors) {
  PtqrOptions o = tiny_options(testing::TempDir() + "/ptqr_bad");
  auto msg = [&](const PtqrOptions& x) -> std::string {
    try {
      run_ptqr(x);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  PtqrOptions b = o;
  b.group = 64;
  EXPECT_NE(msg(b).find("--group 64"), std::string::npos);
  b = o, b.calib_ids.resize(5);
  EXPECT_NE(msg(b).find("fewer than one window"), std::string::npos);
  b = o, b.kv = KvDType::kFP8E4M3;
  EXPECT_NE(msg(b).find("fp8_e4m3"), std::string::npos);
  b = o, b.holdout = 4;
  EXPECT_NE(msg(b).find("--holdout 4"), std::string::npos);
  b = o, b.holdout = 1, b.val_every = 0;
  EXPECT_NE(msg(b).find("--val-every 0"), std::string::npos);
  b = o, b.smooth_tokens = 0;
  EXPECT_NE(msg(b).find("--smooth-tokens 0"), std::string::npos);
  b = o, b.smooth_search = {0.5};
  EXPECT_NE(msg(b).find("--smooth-search needs --smooth"), std::string::npos) << msg(b);
  b = o, b.smooth = 0.5, b.smooth_search = {0.5}, b.smooth_search_mappings = true;
  EXPECT_NE(msg(b).find("--smooth-search-mappings needs"), std::string::npos) << msg(b);
  b = o, b.smooth = 0.5, b.smooth_search = {0.5, 1.5};
  EXPECT_NE(msg(b).find("--smooth-search 1.5"), std::string::npos) << msg(b);
  b = o, b.scheme = QScheme::kNVFP4;
  EXPECT_NE(msg(b).find("--scheme nvfp4"), std::string::npos) << msg(b);
  b = o, b.in = std::string(BS_SOURCE_DIR) + "/tests/fixtures/hybrid";
  EXPECT_FALSE(msg(b).empty());
}

}  // namespace
}  // namespace blockspec
