// The training forward is the drafter serving runs: DraftParams written as
// a z-lab DFlash checkpoint, loaded by DraftModel (f32), drafting one block
// after S context tokens, give the same draft logits as draft_step on a
// row whose anchor follows the same context.
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
#include "train/draft_step.h"
#include "../kernels/randv.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;

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
  const ModelWeights& tw = target->weights();
  const Tensor emb = dequantize_weight(tw.tok_embd), head = dequantize_weight(tw.lm_head);
  FrozenTarget t;
  t.embed = [&](const int32_t* ids, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i)
      std::copy(emb.ptr<float>() + ids[i] * H, emb.ptr<float>() + (ids[i] + 1) * H, out + i * H);
  };
  t.lm_head = head.ptr<float>();
  ThreadPool pool(2);
  const KernelTable kt = select_kernels("");
  const OpContext ctx{&kt, &pool};
  DraftParams g = DraftParams::zeros(s);
  const DraftStepResult r = draft_step(s, p, t, row, nullptr, ctx);
  double err = 0, scale = 1e-6;
  for (int64_t k = 1; k < B; ++k)
    for (int64_t v = 0; v < s.V; ++v) {
      err = std::max(err, static_cast<double>(std::fabs(r.logits[k * s.V + v] - serve_logits[(k - 1) * s.V + v])));
      scale = std::max(scale, static_cast<double>(std::fabs(serve_logits[(k - 1) * s.V + v])));
    }
  EXPECT_LT(err / scale, 1e-4) << "max |train - serve| " << err << " of " << scale;
  std::printf("draft logits, training forward vs serving drafter: max rel err %.3g\n", err / scale);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace blockspec
