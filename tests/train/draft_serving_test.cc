// The training forward is the drafter serving runs: DraftParams written as
// a z-lab DFlash checkpoint, loaded by DraftModel (f32), drafting one block
// after S context tokens, give the same draft logits as draft_step on a
// row whose anchor follows the same context. A DFlash2 drafter written by
// write_draft_checkpoint (convolutions, selector, sliding window) drafts
// with DraftModel::select exactly the tokens draft_step scores correct.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "formats/dflash_config.h"
#include "formats/safetensors.h"
#include "kernels/quant.h"
#include "model/dflash.h"
#include "model/transformer.h"
#include "train/blocks.h"
#include "train/draft_checkpoint.h"
#include "train/draft_step.h"
#include "../kernels/randv.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;

// The target's embedding and head as f32, as the trainer freezes them, and
// the kernels and threads draft_step runs on.
struct TrainSide {
  Tensor emb, head;
  FrozenTarget t;
  ThreadPool pool{2};
  KernelTable kt = select_kernels("");
  OpContext ctx{&kt, &pool};
  explicit TrainSide(const Transformer& target)
      : emb(dequantize_weight(target.weights().tok_embd)), head(dequantize_weight(target.weights().lm_head)) {
    const int64_t H = target.config().hidden_size;
    t.embed = [this, H](const int32_t* ids, int64_t n, float* out) {
      for (int64_t i = 0; i < n; ++i)
        std::copy(emb.ptr<float>() + ids[i] * H, emb.ptr<float>() + (ids[i] + 1) * H, out + i * H);
    };
    t.lm_head = head.ptr<float>();
  }
};

// The logits of block slots 1..B-1 from draft_step (rows of B) against
// serving's (rows of B - 1): max |difference| / max |serving| must be < 1e-4.
double logits_rel_err(const std::vector<float>& train, const std::vector<float>& serve, int64_t B, int64_t V) {
  double err = 0, scale = 1e-6;
  for (int64_t k = 1; k < B; ++k)
    for (int64_t v = 0; v < V; ++v) {
      err = std::max(err, static_cast<double>(std::fabs(train[k * V + v] - serve[(k - 1) * V + v])));
      scale = std::max(scale, static_cast<double>(std::fabs(serve[(k - 1) * V + v])));
    }
  EXPECT_LT(err / scale, 1e-4) << "max |train - serve| " << err << " of " << scale;
  return err / scale;
}

TEST(DraftTraining, ForwardEqualsTheServingDrafter) {
  const std::string target_dir = std::string(BS_SOURCE_DIR) + "/tests/fixtures/dflash/target";
  ModelOptions mo;
  mo.n_threads = 2;
  mo.weights = WeightFormat::kF32;
  auto target = Transformer::load(target_dir, mo);
  const int64_t H = 64, B = 5, S = 7, L = 2;
  const std::vector<int64_t> taps_ids = {1, 4};
  const fs::path dir = fs::temp_directory_path() / ("bs_draft_train_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "config.json");
    f << R"({"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 64,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96,
      "num_hidden_layers": 2, "layer_types": ["full_attention", "full_attention"], "rms_norm_eps": 1e-06,
      "rope_theta": 10000.0, "max_position_embeddings": 256, "vocab_size": 256, "attention_bias": false,
      "tie_word_embeddings": false, "block_size": 5,
      "dflash_config": {"mask_token_id": 250, "target_layer_ids": [1, 4]}})";
  }
  DraftConfig dc = load_draft_config(dir.string());
  DraftShape s;
  s.H = H, s.n_heads = 4, s.n_kv_heads = 2, s.head_dim = 16, s.F = 96, s.n_layers = L;
  s.tap_width = 2 * H, s.V = 256, s.eps = 1e-6f, s.rope = compute_rope(dc.base);
  DraftParams p = DraftParams::init(s, 11, 0.15f);
  std::vector<std::pair<std::string, Tensor>> tensors;
  auto put = [&](const std::string& n, const std::vector<float>& v, Shape shape) {
    Tensor t(DType::kF32, shape);
    std::copy(v.begin(), v.end(), t.mutable_ptr<float>());
    tensors.push_back({n, t});
  };
  p.each([&](const std::string& n, std::vector<float>& v) {
    const int64_t numel = static_cast<int64_t>(v.size());
    if (n.find("gate_up_proj") != std::string::npos) {  // the checkpoint stores gate and up apart
      const std::string pre = n.substr(0, n.find("gate_up_proj"));
      put(pre + "gate_proj.weight", std::vector<float>(v.begin(), v.begin() + numel / 2), {s.F, H});
      put(pre + "up_proj.weight", std::vector<float>(v.begin() + numel / 2, v.end()), {s.F, H});
    } else if (numel == H || numel == s.head_dim) {
      put(n, v, {numel});
    } else {  // [rows, cols]: cols = the input width of the matrix
      const int64_t cols = n == "fc.weight"                            ? s.tap_width
                           : n.find("o_proj") != std::string::npos    ? s.n_heads * s.head_dim
                           : n.find("down_proj") != std::string::npos ? s.F
                                                                      : H;
      put(n, v, {numel / cols, cols});
    }
  });
  write_safetensors((dir / "model.safetensors").string(), tensors);
  auto dm = DraftModel::load(dir.string(), *target, DraftOptions{WeightFormat::kF32, false});

  // Serving: S context rows, then the block [anchor, MASK x 4] at position S.
  const std::vector<float> taps = randv((S + 1) * s.tap_width, 5);
  const int32_t anchor = 42;
  DraftCache cache = dm->new_cache(64);
  std::vector<float> hidden, serve_logits;
  dm->forward(cache, taps.data(), S, anchor, B - 1, hidden);
  dm->logits(hidden.data() + H, B - 1, serve_logits);

  // Training: a row of S + 1 tokens with the anchor at S (its own feature is invisible).
  DraftRow row;
  row.S = S + 1, row.taps = taps.data(), row.B = B;
  for (int64_t i = 0; i <= S; ++i) row.pos.push_back(i);
  row.anchors = {S};
  row.block_ids = {anchor, 250, 250, 250, 250};
  row.spans = block_key_spans(row.anchors, std::vector<int32_t>(S + 1, 0), B, false, 0);
  row.labels.assign(B, 0);
  row.weight.assign(B, 0.f);
  row.weight[1] = 1.f;
  row.denom = 1;
  TrainSide ts(*target);
  const DraftStepResult r = draft_step(s, p, ts.t, row, nullptr, ts.ctx);
  const double rel = logits_rel_err(r.logits, serve_logits, B, s.V);
  std::printf("draft logits, training forward vs serving drafter: max rel err %.3g\n", rel);
  fs::remove_all(dir);
}

TEST(DraftTraining, Dflash2ForwardAndSelectorEqualTheServingDrafter) {
  const std::string target_dir = std::string(BS_SOURCE_DIR) + "/tests/fixtures/dflash/target";
  ModelOptions mo;
  mo.n_threads = 2;
  mo.weights = WeightFormat::kF32;
  auto target = Transformer::load(target_dir, mo);
  const int64_t H = 64, B = 6, S = 9;
  DraftShape s;
  s.H = H, s.n_heads = 4, s.n_kv_heads = 2, s.head_dim = 16, s.F = 96, s.n_layers = 2;
  s.tap_width = 2 * H, s.V = 256, s.eps = 1e-6f;
  s.conv_kernel = 2, s.conv_group = 16, s.selector_rank = 8, s.selector_top_k = 5;
  ModelConfig mc;
  mc.head_dim = 16, mc.rope.theta = 10000.0;
  s.rope = compute_rope(mc);
  DraftParams p = DraftParams::init(s, 11, 0.15f);
  uint64_t seed = 70;  // off the identity init, so the convolutions and the selector matter
  p.each([&](const std::string& n, std::vector<float>& v) {
    if (n.find("conv") == std::string::npos && n.find("selector") == std::string::npos) return;
    const std::vector<float> r = randv(v.size(), ++seed);
    for (size_t i = 0; i < v.size(); ++i) v[i] += (n.find("codebook") != std::string::npos ? 2.f : 0.3f) * r[i];
  });
  DraftArch arch;
  arch.block_size = B, arch.mask_token_id = 250, arch.target_layer_ids = {1, 4}, arch.num_target_layers = 6;
  arch.target_vocab_size = 256, arch.rope_theta = 10000.0, arch.max_position_embeddings = 256;
  arch.sliding_window = 6;  // cuts the context: the block at position S sees context rows S-5..S-1
  const fs::path dir = fs::temp_directory_path() / ("bs_draft2_train_" + std::to_string(::getpid()));
  write_draft_checkpoint(dir.string(), s, p, arch, DType::kF32);
  auto dm = DraftModel::load(dir.string(), *target, DraftOptions{WeightFormat::kF32, false});
  ASSERT_EQ(dm->config().method, DraftMethod::kDFlash2);

  const std::vector<float> taps = randv((S + 1) * s.tap_width, 5);
  const int32_t anchor = 42;
  DraftCache cache = dm->new_cache(64);
  std::vector<float> hidden, serve_logits;
  dm->forward(cache, taps.data(), S, anchor, B - 1, hidden);
  dm->logits(hidden.data() + H, B - 1, serve_logits);
  DraftModel::Selection pick;
  dm->select(hidden.data() + H, serve_logits.data(), B - 1, anchor, 0.f, {}, pick);

  DraftRow row;
  row.S = S + 1, row.taps = taps.data(), row.B = B;
  for (int64_t i = 0; i <= S; ++i) row.pos.push_back(i);
  row.anchors = {S};
  row.block_ids.assign(B, 250);
  row.block_ids[0] = anchor;
  row.spans = block_key_spans(row.anchors, std::vector<int32_t>(S + 1, 0), B, false, arch.sliding_window);
  row.labels.assign(B, 0), row.prev_ids.assign(B, 0);
  for (int64_t k = 1; k < B; ++k) {  // teacher forcing along the drafted path
    row.labels[k] = pick.tokens[k - 1];
    row.prev_ids[k] = k == 1 ? anchor : pick.tokens[k - 2];
  }
  row.weight.assign(B, 1.f);
  row.weight[0] = 0.f;
  row.denom = B - 1;
  TrainSide ts(*target);
  const DraftStepResult r = draft_step(s, p, ts.t, row, nullptr, ts.ctx);
  const double rel = logits_rel_err(r.logits, serve_logits, B, s.V);
  for (int64_t k = 1; k < B; ++k) EXPECT_TRUE(r.correct[k]) << "slot " << k << ": served " << row.labels[k];
  // The selector changes the pick somewhere (else this test would not see it).
  int differs = 0;
  for (int64_t k = 1; k < B; ++k) {
    const float* z = serve_logits.data() + (k - 1) * s.V;
    differs += std::max_element(z, z + s.V) - z != pick.tokens[k - 1];
  }
  EXPECT_GT(differs, 0) << "the selector agreed with the unary argmax everywhere";
  // Another label is not drafted.
  row.labels[2] = (row.labels[2] + 1) % 250;
  EXPECT_FALSE(draft_step(s, p, ts.t, row, nullptr, ts.ctx).correct[2]);
  std::printf("DFlash2 draft logits, training forward vs serving: max rel err %.3g; %d of %lld picks off the unary argmax\n",
              rel, differs, static_cast<long long>(B - 1));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace blockspec
