// The drafters train-drafter shipped, against the z-lab reference package
// (issue 15, item 3): tests/fixtures/train/trained_drafters.safetensors
// (scripts/make_trained_drafter_golden.py) holds, for
// drafters/smollm2-135m-dflash (DFlash, 8192-token draft vocabulary),
// drafters/smollm2-135m-dflash-b16 (the same with block size 16: slots 1..15) and
// drafters/smollm2-135m-dflash2 (DFlash2) on SmolLM2-135M (the GGUF of
// scripts/fetch_models.sh, dequantized to f32 by transformers) and two chat
// prompts, what `dflash` 0.1.0 computes: the target's tap features, the
// anchor, the drafter's hidden states of block slots 1..B-1 from those
// features, the top-8 draft logits and the drafted tokens; for DFlash2 also
// dflash_generate's greedy output and acceptance lengths over 32 tokens.
// blockspec runs the same target in f32 (--weights f32) and must agree:
// features and hidden states to 1e-3 relative, the same top-8 ids, the same
// drafted tokens; the same DFlash2 output and number of verification passes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "../spec_setup.h"
#include "formats/safetensors.h"
#include "runtime/speculative.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;

template <class T>
std::vector<T> vec(const SafetensorsFile& f, const std::string& name) {
  const Tensor t = f.tensor(name);
  return std::vector<T>(t.ptr<T>(), t.ptr<T>() + t.numel());
}

// max |a - b| / max |b|
double rel_err(const float* a, const std::vector<float>& b) {
  double err = 0, scale = 1e-12;
  for (size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return err / scale;
}

TEST(TrainedDrafters, DraftLikeTheReferencePackage) {
  const std::string model_path = test_cache_dir() + "/models/smollm2.gguf";
  ASSERT_TRUE(fs::exists(model_path)) << model_path << " is missing: run scripts/fetch_models.sh smollm2";
  const SafetensorsFile g(std::string(BS_SOURCE_DIR) + "/tests/fixtures/train/trained_drafters.safetensors");
  const nlohmann::json meta = nlohmann::json::parse(g.metadata().at("config"));
  ModelOptions mo;
  mo.n_threads = 2;
  mo.weights = WeightFormat::kF32;  // the GGUF dequantized, as transformers reads it
  auto target = Transformer::load(model_path, mo);
  const int64_t H = target->config().hidden_size, V = target->config().vocab_size;
  for (const auto& [kind, d] : meta.at("drafters").items()) {
    const std::string dir = std::string(BS_SOURCE_DIR) + "/" + d.at("dir").get<std::string>();
    const int K = d.at("block_size").get<int>() - 1;  // drafted slots 1..K
    const std::string method = kind == "dflash2" ? "dflash2" : "dflash";
    SpecConfig c = test_spec(method, K, dir);
    auto dm = test_drafter(c, *target, WeightFormat::kF32);
    configure_spec(c, dm.get(), *target);  // sets the target's tap layers
    const int64_t TH = static_cast<int64_t>(dm->config().target_layer_ids.size()) * H;
    for (int p = 0; p < 2; ++p) {
      const std::string pre = kind + ".p" + std::to_string(p) + ".";
      SCOPED_TRACE(pre);
      const std::vector<int32_t> ids = vec<int32_t>(g, "p" + std::to_string(p) + ".input_ids");
      const int64_t P = static_cast<int64_t>(ids.size());
      // The target's features and greedy anchor.
      KvCache cache = target->new_cache(P + 8);
      std::vector<float> logits, taps;
      target->prefill(ids.data(), P, cache, logits, false, &taps);
      const std::vector<float> ref_feats = vec<float>(g, pre + "feats");
      ASSERT_EQ(static_cast<int64_t>(taps.size()), P * TH);
      const double feat_err = rel_err(taps.data(), ref_feats);
      EXPECT_LT(feat_err, 1e-3) << "tap features against HF";
      const int32_t anchor = vec<int32_t>(g, pre + "anchor").at(0);
      EXPECT_EQ(static_cast<int32_t>(std::max_element(logits.end() - V, logits.end()) - (logits.end() - V)), anchor);
      // The drafter on the reference's features.
      DraftCache dc = dm->new_cache(P + K + 9);
      std::vector<float> hidden, dl;
      dm->forward(dc, ref_feats.data(), P, anchor, K, hidden);
      const std::vector<float> ref_hidden = vec<float>(g, pre + "hidden");
      const double hid_err = rel_err(hidden.data() + H, ref_hidden);
      EXPECT_LT(hid_err, 1e-3) << "drafter hidden states of slots 1.." << K;
      dm->logits(hidden.data() + H, K, dl);
      const std::vector<int32_t> top_ids = vec<int32_t>(g, pre + "top_ids");
      const std::vector<float> top_logits = vec<float>(g, pre + "top_logits");
      std::vector<int32_t> tokens(K);
      for (int64_t k = 0; k < K; ++k) {
        const float* z = dl.data() + k * V;
        tokens[k] = static_cast<int32_t>(std::max_element(z, z + V) - z);
        for (int j = 0; j < 8; ++j) {
          EXPECT_NEAR(z[top_ids[k * 8 + j]], top_logits[k * 8 + j], 2e-3 * std::fabs(top_logits[k * 8]) + 1e-3)
              << "slot " << k + 1 << " rank " << j;
          EXPECT_GE(z[top_ids[k * 8 + j]], z[top_ids[k * 8 + 7]] - 1e-4f);  // the reference's top-8 are ours
        }
      }
      if (kind == "dflash2") {
        DraftModel::Selection sel;
        dm->select(hidden.data() + H, dl.data(), K, anchor, 0.f, {}, sel);
        tokens = sel.tokens;
      }
      EXPECT_EQ(tokens, vec<int32_t>(g, pre + "tokens")) << "drafted tokens";
      std::printf("%s: features rel err %.2e, hidden %.2e, drafted %s\n", pre.c_str(), feat_err, hid_err,
                  tokens == vec<int32_t>(g, pre + "tokens") ? "the reference's tokens" : "OTHER tokens");
      if (kind != "dflash2") continue;
      // dflash_generate end to end: the same output and acceptance histogram.
      auto prop = new_proposer(c, dm, 256);
      GenerateOptions go;
      go.max_new_tokens = 32;
      go.stop_at_eos = false;
      const SpecResult r = generate_speculative(*target, *prop, K, ids, go);
      std::vector<int32_t> got = ids;
      got.insert(got.end(), r.gen.tokens.begin(), r.gen.tokens.end());
      const std::vector<int32_t> want = vec<int32_t>(g, pre + "spec_output");
      got.resize(std::min(got.size(), want.size()));
      EXPECT_EQ(got, want) << "speculative output";
      // The same drafts give the same verification passes (the last one may be cut by the length).
      const std::vector<int32_t> lens = vec<int32_t>(g, pre + "acceptance_lengths");
      std::string seq;
      for (int32_t l : lens) seq += std::to_string(l) + " ";
      std::printf("  dflash_generate: %zu passes (tokens per pass %s); blockspec: %lld passes, mean acceptance %.3f\n",
                  lens.size(), seq.c_str(), static_cast<long long>(r.target_passes), r.stats.mean_acceptance_length());
      EXPECT_NEAR(static_cast<double>(r.target_passes), static_cast<double>(lens.size()), 1.0);
    }
  }
}

}  // namespace
}  // namespace blockspec
