// PTQR of a DFlash drafter (issue 18 part 4, ptqr/ptqr_drafter.h):
// - the distillation loss's gradient (kl_rows) against finite differences;
// - the student (W8A8 RTN codes dequantized, linear inputs rounded per token
//   to int8) drafts the logits the served W8A8 checkpoint of the same drafter
//   drafts, to summation order -- and without the activation rounding it
//   does not;
// - `ptqr` on a drafter end to end on the tiny fixture target: it lowers the
//   held-out KL against the bf16 drafter below RTN's, and writes a W8A8
//   checkpoint that serves with exactly the trained codes.
#include "ptqr/ptqr_drafter.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "formats/dflash_config.h"
#include "formats/safetensors.h"
#include "kernels/quant.h"
#include "model/dflash.h"
#include "model/transformer.h"
#include "quantize/quantize.h"
#include "train/blocks.h"
#include "train/datagen.h"
#include "train/draft_checkpoint.h"
#include "train/gemm.h"
#include "../kernels/randv.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;

TEST(KlRows, GradientMatchesFiniteDifferences) {
  ThreadPool pool(2);
  const KernelTable kt = select_kernels("");
  const OpContext ctx{&kt, &pool};
  const int64_t n = 3, V = 17;
  std::vector<float> z = randv(n * V, 3), t = randv(n * V, 4);
  for (float& x : z) x *= 3.f;
  for (float& x : t) x *= 3.f;
  const std::vector<int32_t> labels = {1, 2, 3};
  const std::vector<float> w = {1.f, 0.5f, 0.f};
  std::vector<uint8_t> ok(n);
  std::vector<float> dz(n * V);
  const double loss = kl_rows(ctx, z.data(), t.data(), labels.data(), w.data(), n, V, 2.0, dz.data(), ok.data());
  EXPECT_GT(loss, 0.0);
  for (int64_t i = 0; i < n * V; ++i) {
    const float h = 1e-2f;
    std::vector<float> zp = z, zm = z;
    zp[i] += h, zm[i] -= h;
    const double lp = kl_rows(ctx, zp.data(), t.data(), labels.data(), w.data(), n, V, 2.0, nullptr, ok.data());
    const double lm = kl_rows(ctx, zm.data(), t.data(), labels.data(), w.data(), n, V, 2.0, nullptr, ok.data());
    EXPECT_NEAR(dz[i], (lp - lm) / (2 * h), 2e-4) << "logit " << i;
  }
  // KL of a distribution to itself (logits shifted by a constant) is 0, and so is its gradient.
  std::vector<float> zs = t;
  for (float& x : zs) x += 1.5f;
  EXPECT_NEAR(kl_rows(ctx, zs.data(), t.data(), labels.data(), w.data(), n, V, 2.0, dz.data(), ok.data()), 0.0, 1e-6);
  for (float d : dz) EXPECT_NEAR(d, 0.f, 1e-6f);
}

// The tiny fixture target (f32), a tiny DFlash drafter on its layers 1 and 4 written as bf16.
struct Tiny {
  std::string target_dir = std::string(BS_SOURCE_DIR) + "/tests/fixtures/dflash/target";
  std::unique_ptr<Transformer> target;
  DraftShape s;
  DraftArch arch;
  fs::path root;
  Tiny() {
    ModelOptions mo;
    mo.n_threads = 2;
    mo.weights = WeightFormat::kF32;
    target = Transformer::load(target_dir, mo);
    s.H = 64, s.n_heads = 4, s.n_kv_heads = 2, s.head_dim = 16, s.F = 96, s.n_layers = 1, s.tap_width = 128;
    s.V = 256, s.eps = 1e-6f;
    ModelConfig rc;
    rc.head_dim = 16, rc.rope.theta = 10000.0;
    s.rope = compute_rope(rc);
    arch.block_size = 5, arch.mask_token_id = 250, arch.target_layer_ids = {1, 4}, arch.num_target_layers = 6;
    arch.target_vocab_size = 256, arch.rope_theta = 10000.0, arch.max_position_embeddings = 256;
    root = fs::temp_directory_path() / ("bs_ptqr_drafter_" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~Tiny() { fs::remove_all(root); }
  // A drafter with N(0, std) weights at root/name (bf16), and its parameters as read back.
  DraftParams write_drafter(const std::string& name, float std, uint64_t seed) {
    DraftParams p = DraftParams::init(s, seed, std);
    write_draft_checkpoint((root / name).string(), s, p, arch, DType::kBF16);
    DraftParams back = DraftParams::zeros(s);
    read_draft_params((root / name).string(), s, back);
    return back;
  }
};

QuantSpec w8a8_spec() {
  QuantizeOptions qo;
  qo.scheme = QScheme::kW8A8, qo.group = 128;
  return quant_spec_for(qo, QScheme::kW8A8, DType::kBF16);
}

TEST(PtqrDrafter, StudentDraftsWhatTheServedW8A8CheckpointDrafts) {
  Tiny t;
  const DraftParams teacher = t.write_drafter("bf16", 0.15f, 11);
  QuantizeOptions qo;
  qo.in = (t.root / "bf16").string(), qo.out = (t.root / "w8a8").string();
  qo.scheme = QScheme::kW8A8, qo.group = 128, qo.progress = false;
  quantize_model(qo);
  auto dm = DraftModel::load(qo.out, *t.target, DraftOptions{});
  const int64_t B = t.arch.block_size, S = 7, H = t.s.H;
  const std::vector<float> taps = randv((S + 1) * t.s.tap_width, 5);
  const int32_t anchor = 42;
  DraftCache cache = dm->new_cache(64);
  std::vector<float> hidden, serve;
  dm->forward(cache, taps.data(), S, anchor, B - 1, hidden);
  dm->logits(hidden.data() + H, B - 1, serve);

  ThreadPool pool(2);
  const KernelTable kt = select_kernels("");
  const OpContext ctx{&kt, &pool};
  const DraftParams student = w8a8_rtn_student(teacher, t.s, w8a8_spec(), pool);
  Tensor emb = dequantize_weight(t.target->weights().tok_embd), head = dequantize_weight(t.target->weights().lm_head);
  FrozenTarget ft;
  ft.embed = [&](const int32_t* ids, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) std::copy_n(emb.ptr<float>() + ids[i] * H, H, out + i * H);
  };
  ft.lm_head = head.ptr<float>();
  DraftRow row;  // S + 1 tokens with the anchor at S (its own feature is invisible)
  row.S = S + 1, row.taps = taps.data(), row.B = B;
  for (int64_t i = 0; i <= S; ++i) row.pos.push_back(i);
  row.anchors = {S};
  row.block_ids = {anchor, 250, 250, 250, 250};
  row.spans = block_key_spans(row.anchors, std::vector<int32_t>(S + 1, 0), B, false, 0);
  row.labels.assign(B, 0);
  row.weight.assign(B, 0.f);
  row.weight[1] = 1.f;
  auto rel_err = [&](const DraftShape& s) {
    const std::vector<float> z = draft_step(s, student, ft, row, nullptr, ctx).logits;
    double err = 0, scale = 1e-6;
    for (int64_t k = 1; k < B; ++k)
      for (int64_t v = 0; v < t.s.V; ++v) {
        err = std::max(err, static_cast<double>(std::fabs(z[k * t.s.V + v] - serve[(k - 1) * t.s.V + v])));
        scale = std::max(scale, static_cast<double>(std::fabs(serve[(k - 1) * t.s.V + v])));
      }
    return err / scale;
  };
  DraftShape ss = t.s;
  ss.act_int8 = true;
  const double with = rel_err(ss), without = rel_err(t.s);
  std::printf("student vs served W8A8 drafter: max rel err %.3g with int8 activations, %.3g without\n", with, without);
  EXPECT_LT(with, 1e-4);
  EXPECT_GT(without, 20 * with);  // the activation rounding is what makes the student the served drafter
}

// Data of the tiny target as `train-drafter --data-only` makes it: 30 prompts answered one at a time (the record
// order, hence the held-out split, is fixed), taps of layers 1 and 4.
std::string make_data(const Tiny& t) {
  const std::string data_path = (t.root / "data.bin").string();
  ModelOptions mo;
  mo.n_threads = 2;
  mo.weights = WeightFormat::kF32;
  EngineOptions eo;
  eo.max_num_seqs = 1, eo.max_model_len = 128, eo.capture_taps = t.arch.target_layer_ids;
  Engine eng(Transformer::load(t.target_dir, mo), eo);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 30; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 5 + i % 4; ++j) p.push_back((i * 37 + j * 11 + 1) % 240);
    prompts.push_back(p);
  }
  DraftDataWriter w(data_path, 2, 64);
  DatagenOptions dg;
  dg.max_new_tokens = 40;
  EXPECT_EQ(generate_draft_data(eng, prompts, w, dg), 0);
  return data_path;
}

TEST(PtqrDrafter, RetrainingLowersHeldOutKlAndServesTheTrainedCodes) {
  Tiny t;
  const std::string data_path = make_data(t);
  t.write_drafter("bf16", 0.3f, 7);  // large weights: the int8 rounding costs a visible KL
  PtqrDrafterOptions o;
  o.drafter = (t.root / "bf16").string(), o.out = (t.root / "ptqr").string(), o.target = t.target_dir;
  o.data = data_path, o.steps = 80, o.seq_len = 128, o.max_anchors = 16, o.lr = 1e-4, o.n_threads = 2;
  o.eval_every = 10, o.progress = false, o.dither_start = 1.0;
  const PtqrDrafterReport r = run_ptqr_drafter(o);
  std::printf("held-out KL: RTN %.5f -> PTQR %.5f; eal teacher %.3f RTN %.3f PTQR %.3f\n", r.rtn.kl, r.trained.kl,
              r.teacher.eal, r.rtn.eal, r.trained.eal);
  EXPECT_NEAR(r.teacher.kl, 0.0, 1e-9);
  EXPECT_GT(r.rtn.kl, 1e-4);
  EXPECT_LT(r.trained.kl, 0.92 * r.rtn.kl);
  EXPECT_EQ(r.steps, 80);
  EXPECT_GT(r.n_copied, 0);  // norms and the config's tensors byte for byte
  EXPECT_FALSE(fs::exists(o.out + ".ptqr-state"));
  // OUT is a W8A8 drafter checkpoint (compressed-tensors int8 codes, the teacher's norms byte for byte) that
  // serves, and training moved its codes off the RTN export's.
  EXPECT_TRUE(is_draft_checkpoint(o.out));
  QuantizeOptions qo;
  qo.in = o.drafter, qo.out = (t.root / "rtn").string(), qo.scheme = QScheme::kW8A8, qo.group = 128;
  qo.progress = false;
  quantize_model(qo);
  const SafetensorsCheckpoint ck(o.out), rtn(qo.out), bf(o.drafter);
  const Tensor a = ck.tensor("layers.0.mlp.down_proj.weight"), b = rtn.tensor("layers.0.mlp.down_proj.weight");
  ASSERT_EQ(a.dtype(), DType::kI8);
  ASSERT_EQ(a.numel(), b.numel());
  int64_t moved = 0;
  for (int64_t i = 0; i < a.numel(); ++i) moved += a.ptr<int8_t>()[i] != b.ptr<int8_t>()[i];
  EXPECT_GT(moved, 0);
  const Tensor n1 = ck.tensor("layers.0.input_layernorm.weight"), n0 = bf.tensor("layers.0.input_layernorm.weight");
  ASSERT_EQ(n1.nbytes(), n0.nbytes());
  EXPECT_EQ(std::memcmp(n1.data(), n0.data(), n0.nbytes()), 0);
  auto dm = DraftModel::load(o.out, *t.target, DraftOptions{});
  DraftCache cache = dm->new_cache(64);
  std::vector<float> hidden, logits;
  const std::vector<float> taps = randv(8 * t.s.tap_width, 9);
  dm->forward(cache, taps.data(), 7, 42, t.arch.block_size - 1, hidden);
  dm->logits(hidden.data() + t.s.H, t.arch.block_size - 1, logits);
  for (float z : logits) ASSERT_TRUE(std::isfinite(z));
}

// A run stopped half way (--stop-after) and resumed writes the checkpoint an uninterrupted run writes, byte for
// byte; a resume with other settings is refused.
TEST(PtqrDrafter, ResumedRunEqualsUninterruptedRun) {
  Tiny t;
  const std::string data_path = make_data(t);
  t.write_drafter("bf16", 0.3f, 7);
  PtqrDrafterOptions o;
  o.drafter = (t.root / "bf16").string(), o.target = t.target_dir, o.data = data_path;
  o.steps = 30, o.seq_len = 128, o.max_anchors = 16, o.lr = 1e-4, o.n_threads = 2, o.eval_every = 10;
  o.progress = false;
  PtqrDrafterOptions whole = o, part = o;
  whole.out = (t.root / "whole").string();
  part.out = (t.root / "part").string();
  run_ptqr_drafter(whole);
  part.stop_after_steps = 13;  // between two periodic saves
  const PtqrDrafterReport first = run_ptqr_drafter(part);
  EXPECT_TRUE(first.stopped);
  EXPECT_FALSE(fs::exists(part.out + "/model.safetensors"));
  PtqrDrafterOptions other = part;
  other.lr = 2e-4, other.resume = true, other.stop_after_steps = -1;
  EXPECT_THROW(run_ptqr_drafter(other), Error);
  part.resume = true, part.stop_after_steps = -1;
  const PtqrDrafterReport second = run_ptqr_drafter(part);
  EXPECT_EQ(second.resumed_from, 13);
  EXPECT_EQ(second.steps, 17);
  const SafetensorsCheckpoint a(whole.out), b(part.out);
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& n : a.names()) {
    const Tensor x = a.tensor(n), y = b.tensor(n);
    ASSERT_EQ(x.nbytes(), y.nbytes()) << n;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0) << n;
  }
}

}  // namespace
}  // namespace blockspec
