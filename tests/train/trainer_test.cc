// The trainer end to end on the tiny fixture target: data generated through
// the batched engine with taps, a few steps of training, checkpoints. A run
// stopped half way and resumed ends bit-identical to the run that never
// stopped (masters, moments, the written drafter), and the written drafter
// loads as a serving DraftModel.
#include "train/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "base/error.h"
#include "formats/dflash_config.h"
#include "tensor/dtype.h"
#include "model/dflash.h"
#include "train/datagen.h"
#include "train/frozen_target.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(Trainer, ResumedRunEqualsUninterruptedRun) {
  const std::string target_dir = std::string(BS_SOURCE_DIR) + "/tests/fixtures/dflash/target";
  const fs::path root = fs::temp_directory_path() / ("bs_trainer_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  ModelOptions mo;
  mo.n_threads = 2;
  mo.weights = WeightFormat::kF32;
  const std::vector<int64_t> taps = {1, 4};
  const std::string data_path = (root / "data.bin").string();
  {
    EngineOptions eo;
    eo.max_num_seqs = 4;
    eo.max_model_len = 128;
    eo.capture_taps = taps;
    Engine eng(Transformer::load(target_dir, mo), eo);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 12; ++i) {
      std::vector<int32_t> p;
      for (int j = 0; j < 6 + i % 4; ++j) p.push_back((i * 37 + j * 11 + 1) % 240);
      prompts.push_back(p);
    }
    DraftDataWriter w(data_path, 2, 64);
    DatagenOptions dg;
    dg.max_new_tokens = 24;
    for (int64_t i = 11; i >= 0; --i) dg.order.push_back(i);  // answered last prompt first
    EXPECT_EQ(generate_draft_data(eng, prompts, w, dg), 0);
    EXPECT_EQ(w.done().size(), 12u);
    dg.order.back() = dg.order.front();
    EXPECT_THROW(generate_draft_data(eng, prompts, w, dg), Error);  // a prompt twice in the order
    dg.order.back() = 12;
    EXPECT_THROW(generate_draft_data(eng, prompts, w, dg), Error);  // no such prompt
    dg.order.pop_back();  // a subset of the prompts, all done already: nothing to generate
    EXPECT_EQ(generate_draft_data(eng, prompts, w, dg), 0);
    EXPECT_EQ(w.done().size(), 12u);
  }
  auto model = Transformer::load(target_dir, mo);
  const DraftData data(data_path);
  ASSERT_EQ(data.records().size(), 12u);
  for (const DraftRecordView& r : data.records()) {  // each record keeps its prompt's index, whatever the order
    std::vector<int32_t> head(r.tokens, r.tokens + r.n_prompt);
    std::vector<int32_t> want;
    for (int j = 0; j < 6 + r.index % 4; ++j) want.push_back((r.index * 37 + j * 11 + 1) % 240);
    EXPECT_EQ(head, want) << "record of prompt " << r.index;
  }
  ThreadPool pool(2);
  const KernelTable kt = select_kernels("");
  const OpContext ctx{&kt, &pool};
  auto frozen = freeze_target(*model, pool, false);
  DraftShape s;
  s.H = 64, s.n_heads = 4, s.n_kv_heads = 2, s.head_dim = 16, s.F = 96, s.n_layers = 1, s.tap_width = 128;
  s.V = 256, s.eps = 1e-6f;
  ModelConfig rc;
  rc.head_dim = 16, rc.rope.theta = 10000.0;
  s.rope = compute_rope(rc);
  DraftArch arch;
  arch.block_size = 4, arch.mask_token_id = 250, arch.target_layer_ids = taps, arch.num_target_layers = 6;
  arch.target_vocab_size = 256, arch.rope_theta = 10000.0, arch.max_position_embeddings = 256;
  TrainOptions o;
  o.epochs = 3, o.seq_len = 64, o.max_anchors = 8, o.lr = 3e-3, o.eval_every = 4;
  auto run = [&](const fs::path& out, int64_t max_steps, bool resume) {
    DraftParams p = DraftParams::init(s, 5, 0.05f);
    TrainOptions oo = o;
    oo.max_steps = max_steps;
    return train_drafter(data, frozen->view, s, p, arch, oo, out.string(), resume, ctx, {});
  };
  const TrainResult whole = run(root / "whole", 0, false);
  ASSERT_GT(whole.steps, 6);
  run(root / "split", whole.steps / 2, false);
  const TrainResult rest = run(root / "split", 0, true);
  EXPECT_EQ(rest.steps, whole.steps - whole.steps / 2);
  EXPECT_EQ(slurp(root / "whole" / "train_state.safetensors"), slurp(root / "split" / "train_state.safetensors"));
  EXPECT_EQ(slurp(root / "whole" / "model.safetensors"), slurp(root / "split" / "model.safetensors"));
  // Training moved the weights away from the init, and serving loads the result.
  DraftParams init = DraftParams::init(s, 5, 0.05f), trained = DraftParams::zeros(s);
  std::vector<AdamW> opt;
  trained.each([&](const std::string&, std::vector<float>& v) { opt.emplace_back(static_cast<int64_t>(v.size())); });
  EXPECT_EQ(load_train_state((root / "whole" / "train_state.safetensors").string(), trained, opt), whole.steps);
  EXPECT_NE(trained.fc, init.fc);
  EXPECT_NE(trained.layers[0].gate_up, init.layers[0].gate_up);
  auto dm = DraftModel::load((root / "whole").string(), *model, DraftOptions{WeightFormat::kF32, false});
  EXPECT_EQ(dm->config().block_size, 4);
  EXPECT_EQ(dm->config().target_layer_ids, taps);

  const DraftArch arch_full = arch;
  // A reduced draft vocabulary: the head is the target's rows of the 100
  // most frequent response tokens; serving drafts nothing outside them.
  arch.draft_vocab = choose_draft_vocab(data, 100, 256, "test data");
  ASSERT_EQ(arch.draft_vocab.size(), 100u);
  ASSERT_TRUE(std::is_sorted(arch.draft_vocab.begin(), arch.draft_vocab.end()));
  auto reduced = freeze_target(*model, pool, false, arch.draft_vocab);
  arch.head = reduced->lm_head.data();
  DraftShape sr = s;
  sr.V = 100;
  DraftParams pr = DraftParams::init(sr, 5, 0.05f);
  TrainOptions oo = o;
  oo.max_steps = 4;
  train_drafter(data, reduced->view, sr, pr, arch, oo, (root / "reduced").string(), false, ctx, {});
  auto dr = DraftModel::load((root / "reduced").string(), *model, DraftOptions{WeightFormat::kF32, false});
  EXPECT_EQ(dr->config().draft_vocab_size, 100);
  std::vector<float> hidden(2 * 64, 0.5f), logits;
  hidden[3] = -2.f;
  dr->logits(hidden.data(), 2, logits);
  ASSERT_EQ(logits.size(), 2u * 256);
  std::vector<bool> in(256, false);
  for (int32_t id : arch.draft_vocab) in[id] = true;
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t v = 0; v < 256; ++v) {
      if (!in[v]) {
        EXPECT_EQ(logits[r * 256 + v], -INFINITY) << v;
        continue;
      }
      // Inside the vocabulary: the target head row (bf16 as written), dotted with the hidden state.
      const int64_t i = std::lower_bound(arch.draft_vocab.begin(), arch.draft_vocab.end(), v) - arch.draft_vocab.begin();
      double want = 0;
      for (int64_t h = 0; h < 64; ++h) want += bf16_to_f32(f32_to_bf16(reduced->lm_head[i * 64 + h])) * hidden[r * 64 + h];
      EXPECT_NEAR(logits[r * 256 + v], want, 1e-4 * (1 + std::fabs(want))) << v;
    }

  // D-PACE position weights (--position-weights dpace) reach the step: 3 steps train other weights than gamma's
  // decay from the same init and anchors, the same again when rerun. (The weights' arithmetic against PyTorch:
  // draft_grad_golden_test.cc, draft_dpace_grad.)
  auto short_run = [&](const fs::path& out, double alpha) {
    DraftParams p = DraftParams::init(s, 5, 0.05f);
    TrainOptions od = o;
    od.max_steps = 3, od.dpace_alpha = alpha;
    const TrainResult r = train_drafter(data, frozen->view, s, p, arch_full, od, out.string(), false, ctx, {});
    EXPECT_TRUE(std::isfinite(r.val_eal_end));
    return slurp(out / "model.safetensors");
  };
  const std::string exp3 = short_run(root / "exp3", 0), dp3 = short_run(root / "dpace3", 0.5);
  EXPECT_NE(exp3, dp3);
  EXPECT_EQ(dp3, short_run(root / "dpace3b", 0.5));
  EXPECT_NE(dp3, short_run(root / "dpace3c", 0.9));  // alpha is read

  // A drafter trained causal in the block (--block-attention causal) is written so (is_causal, dflash_config.causal)
  // and serving drafts slots 1..K the same whatever K; the bidirectional one above does not.
  DraftArch arch_c = arch_full;
  arch_c.causal = true;
  {
    DraftParams p = DraftParams::init(s, 5, 0.05f);
    TrainOptions oc = o;
    oc.max_steps = 3;
    train_drafter(data, frozen->view, s, p, arch_c, oc, (root / "causal").string(), false, ctx, {});
  }
  auto slots = [&](const fs::path& dir, int64_t k) {  // the hidden states of slots 0..k after a fixed context
    auto d = DraftModel::load(dir.string(), *model, DraftOptions{WeightFormat::kF32, false});
    std::vector<float> feats(10 * s.tap_width), hidden;
    for (size_t i = 0; i < feats.size(); ++i) feats[i] = std::sin(0.37f * static_cast<float>(i));
    DraftCache dc = d->new_cache(32);
    d->forward(dc, feats.data(), 10, 7, k, hidden);
    return std::make_pair(d->config().layer_causal, hidden);
  };
  const auto [causal_layers, c3] = slots(root / "causal", 3);
  EXPECT_EQ(causal_layers, std::vector<bool>(s.n_layers, true));
  const std::vector<float> c2 = slots(root / "causal", 2).second;  // block 4 of the fixture drafter: K <= 3
  ASSERT_EQ(c3.size(), 4u * s.H);
  EXPECT_EQ(std::vector<float>(c3.begin(), c3.begin() + 3 * s.H), c2);
  EXPECT_EQ(std::vector<float>(c3.begin(), c3.begin() + 2 * s.H), slots(root / "causal", 1).second);
  const auto [bidir_layers, b3] = slots(root / "whole", 3);
  EXPECT_EQ(bidir_layers, std::vector<bool>(s.n_layers, false));
  EXPECT_NE(std::vector<float>(b3.begin(), b3.begin() + 2 * s.H), slots(root / "whole", 1).second);
  fs::remove_all(root);
}

// The tiny fixture target in an engine of 4 sequences x 128 tokens (f32 weights), capturing `taps`.
std::unique_ptr<Engine> fixture_engine(const std::vector<int64_t>& taps) {
  ModelOptions mo;
  mo.n_threads = 2;
  mo.weights = WeightFormat::kF32;
  EngineOptions eo;
  eo.max_num_seqs = 4;
  eo.max_model_len = 128;
  eo.capture_taps = taps;
  return std::make_unique<Engine>(
      Transformer::load(std::string(BS_SOURCE_DIR) + "/tests/fixtures/dflash/target", mo), eo);
}

// 8 prompts of 5-7 tokens: token j of prompt i is (i * a + j * b + c) % 240.
std::vector<std::vector<int32_t>> fixture_prompts(int a, int b, int c) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 5 + i % 3; ++j) p.push_back((i * a + j * b + c) % 240);
    prompts.push_back(p);
  }
  return prompts;
}

// Responses an earlier run generated are not answered again: their tokens are
// prefilled for the taps (--responses). The records keep exactly the known
// tokens, and the prefilled taps equal the taps captured while decoding up
// to the summation order of the prefill GEMMs.
TEST(Datagen, KnownResponsesArePrefilledForTheirTaps) {
  const fs::path root = fs::temp_directory_path() / ("bs_datagen_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const std::unique_ptr<Engine> engine = fixture_engine({1, 4});
  Engine& eng = *engine;
  const std::vector<std::vector<int32_t>> prompts = fixture_prompts(41, 13, 3);
  DatagenOptions dg;
  dg.max_new_tokens = 20;
  const std::string first = (root / "first.bin").string(), again = (root / "again.bin").string();
  {
    DraftDataWriter w(first, 2, 64, TapDType::kF32);
    ASSERT_EQ(generate_draft_data(eng, prompts, w, dg), 0);
  }
  const DraftData d1(first);
  std::map<int64_t, std::vector<int32_t>> known;
  for (const DraftRecordView& r : d1.records())
    if (r.index % 4 != 3) known[r.index].assign(r.tokens, r.tokens + r.n_tokens);  // 6 known, 2 generated again
  ASSERT_EQ(known.size(), 6u);
  dg.responses = &known;
  int64_t known_tokens = 0, new_tokens = 0;
  dg.progress = [&](const DatagenProgress& p) { known_tokens = p.known_tokens, new_tokens = p.new_tokens; };
  {
    DraftDataWriter w(again, 2, 64, TapDType::kF32);
    ASSERT_EQ(generate_draft_data(eng, prompts, w, dg), 0);
    for (size_t j = 0; j < 6; ++j) EXPECT_EQ(w.done()[j] % 4 == 3, false) << "known prompts are prefilled first";
  }
  EXPECT_GT(known_tokens, 0);
  EXPECT_GT(new_tokens, 0);
  const DraftData d2(again);
  ASSERT_EQ(d2.records().size(), 8u);
  std::map<int64_t, const DraftRecordView*> by_index;
  for (const DraftRecordView& r : d1.records()) by_index[r.index] = &r;
  for (const DraftRecordView& r : d2.records()) {
    const DraftRecordView& o = *by_index.at(r.index);
    ASSERT_EQ(std::vector<int32_t>(r.tokens, r.tokens + r.n_tokens), std::vector<int32_t>(o.tokens, o.tokens + o.n_tokens))
        << "prompt " << r.index;
    EXPECT_EQ(r.n_prompt, o.n_prompt);
    // A prefilled record has taps for every token but the last; a generated one may lack its last step's row.
    if (known.count(r.index)) ASSERT_EQ(r.rows, r.n_tokens - 1) << "prompt " << r.index;
    ASSERT_GE(r.rows, o.rows) << "prompt " << r.index;
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < o.rows * 128; ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(r.taps[i] - o.taps[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(o.taps[i])));
    }
    EXPECT_LE(worst, 1e-5 * scale) << "prompt " << r.index;
  }
  // A known response that does not start with the prompt as rendered now fails.
  known[0][0] = (known[0][0] + 1) % 240;
  DraftDataWriter w(( root / "bad.bin").string(), 2, 64, TapDType::kF32);
  EXPECT_THROW(generate_draft_data(eng, prompts, w, dg), Error);
  fs::remove_all(root);
}

// --tokens-only: the engine captures no taps, generated records carry the same
// greedy tokens as a tapped run's with rows = 0, and known responses are
// copied in first, as they are, without a request to the engine.
TEST(Datagen, TokensOnlyCopiesKnownResponsesAndGeneratesTheRest) {
  const fs::path root = fs::temp_directory_path() / ("bs_datagen_tok_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const std::vector<std::vector<int32_t>> prompts = fixture_prompts(29, 17, 5);
  DatagenOptions dg;
  dg.max_new_tokens = 20;
  const std::string tapped = (root / "tapped.bin").string(), tok = (root / "tokens.bin").string();
  {
    DraftDataWriter w(tapped, 2, 64, TapDType::kF32);
    ASSERT_EQ(generate_draft_data(*fixture_engine({1, 4}), prompts, w, dg), 0);
  }
  const DraftData d1(tapped);
  std::map<int64_t, std::vector<int32_t>> known;
  for (const DraftRecordView& r : d1.records())
    if (r.index % 4 != 1) known[r.index].assign(r.tokens, r.tokens + r.n_tokens);  // 6 known, 2 to generate
  ASSERT_EQ(known.size(), 6u);
  dg.responses = &known;
  dg.taps = false;
  for (int64_t i = 7; i >= 0; --i) dg.order.push_back(i);
  int64_t known_tokens = 0, new_tokens = 0;
  dg.progress = [&](const DatagenProgress& p) { known_tokens = p.known_tokens, new_tokens = p.new_tokens; };
  const std::unique_ptr<Engine> engine = fixture_engine({});  // no taps captured
  Engine& eng = *engine;
  {
    DraftDataWriter w(tok, 2, 64, TapDType::kBF16);
    ASSERT_EQ(generate_draft_data(eng, prompts, w, dg), 0);
    const std::vector<int64_t> first6(w.done().begin(), w.done().begin() + 6);
    EXPECT_EQ(first6, (std::vector<int64_t>{7, 6, 4, 3, 2, 0})) << "known responses first, in the given order";
  }
  int64_t want_known = 0, want_new = 0;
  for (const DraftRecordView& r : d1.records()) (known.count(r.index) ? want_known : want_new) += r.n_tokens - r.n_prompt;
  EXPECT_EQ(known_tokens, want_known);
  EXPECT_EQ(new_tokens, want_new);
  // Only the two unknown prompts reached the engine.
  EXPECT_EQ(eng.metrics().requests_finished, 2u);
  const DraftData d2(tok);
  ASSERT_EQ(d2.records().size(), 8u);
  std::map<int64_t, const DraftRecordView*> by_index;
  for (const DraftRecordView& r : d1.records()) by_index[r.index] = &r;
  for (const DraftRecordView& r : d2.records()) {
    const DraftRecordView& o = *by_index.at(r.index);
    EXPECT_EQ(r.rows, 0) << "prompt " << r.index;
    EXPECT_EQ(r.n_prompt, o.n_prompt) << "prompt " << r.index;
    EXPECT_EQ(std::vector<int32_t>(r.tokens, r.tokens + r.n_tokens), std::vector<int32_t>(o.tokens, o.tokens + o.n_tokens))
        << "prompt " << r.index;
  }
  {  // a rerun has nothing left to do
    DraftDataWriter w(tok, 2, 64, TapDType::kBF16);
    ASSERT_EQ(generate_draft_data(eng, prompts, w, dg), 0);
    EXPECT_EQ(w.done().size(), 8u);
  }
  EXPECT_EQ(eng.metrics().requests_finished, 2u);
  EXPECT_EQ(DraftData(tok).records().size(), 8u);
  fs::remove_all(root);
}

// known_only: only the prompts with a known response get a record (prefilled
// for their taps); the others reach no engine request and are not counted.
TEST(Datagen, KnownOnlyPrefillsTheKnownAndGeneratesNothing) {
  const fs::path root = fs::temp_directory_path() / ("bs_datagen_ko_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const std::vector<std::vector<int32_t>> prompts = fixture_prompts(29, 17, 5);
  DatagenOptions dg;
  dg.max_new_tokens = 20;
  const std::string tapped = (root / "tapped.bin").string(), ko = (root / "known.bin").string();
  {
    DraftDataWriter w(tapped, 2, 64, TapDType::kF32);
    ASSERT_EQ(generate_draft_data(*fixture_engine({1, 4}), prompts, w, dg), 0);
  }
  const DraftData d1(tapped);
  std::map<int64_t, std::vector<int32_t>> known;
  for (const DraftRecordView& r : d1.records())
    if (r.index % 3 == 0) known[r.index].assign(r.tokens, r.tokens + r.n_tokens);
  ASSERT_EQ(known.size(), 3u);
  dg.responses = &known;
  dg.known_only = true;
  int64_t total = -1, new_tokens = -1;
  dg.progress = [&](const DatagenProgress& p) { total = p.total, new_tokens = p.new_tokens; };
  const std::unique_ptr<Engine> engine = fixture_engine({1, 4});
  {
    DraftDataWriter w(ko, 2, 64, TapDType::kF32);
    ASSERT_EQ(generate_draft_data(*engine, prompts, w, dg), 0);
  }
  EXPECT_EQ(total, 3);
  EXPECT_EQ(new_tokens, 0);
  const DraftData d2(ko);
  ASSERT_EQ(d2.records().size(), 3u);
  for (const DraftRecordView& r : d2.records()) {
    ASSERT_TRUE(known.count(r.index)) << "prompt " << r.index;
    EXPECT_EQ(std::vector<int32_t>(r.tokens, r.tokens + r.n_tokens), known.at(r.index)) << "prompt " << r.index;
    EXPECT_EQ(r.rows, r.n_tokens - 1) << "prompt " << r.index;  // taps for all but the last token
  }
  fs::remove_all(root);
}

// --num-prompts N1,N2,...: three files of 4, 3 and 5 prompts (indices 0-3, 4-6, 7-11) in a shuffled order.
TEST(Datagen, PerFileCountsKeepEachFilesFirstAndItsKnownPromptsFirst) {
  const std::vector<int64_t> order = {9, 2, 5, 11, 0, 7, 4, 3, 8, 1, 10, 6};
  const std::vector<int64_t> sizes = {4, 3, 5};
  // No known prompts: file 0's first 2 in the order (2, 0), none of file 1, file 2's first 3 (9, 11, 7).
  EXPECT_EQ(select_per_file(order, sizes, {2, 0, 3}, {}), (std::vector<int64_t>{9, 2, 11, 0, 7}));
  // Known 1 and 3 (file 0) and 6 (file 1) take their files' places first: file 0 keeps 3 and 1, not 2 and 0;
  // file 1's one place goes to 6; file 2 has none known. The result keeps the order's order.
  EXPECT_EQ(select_per_file(order, sizes, {2, 1, 3}, {1, 3, 6}), (std::vector<int64_t>{9, 11, 7, 3, 1, 6}));
  // More known than places: the first known in the order (3 before 1).
  EXPECT_EQ(select_per_file(order, sizes, {1, 0, 0}, {1, 3}), (std::vector<int64_t>{3}));
  // A count above a file's size keeps all of it; the order may hold only some prompts.
  EXPECT_EQ(select_per_file({5, 0, 4}, sizes, {9, 9, 9}, {}), (std::vector<int64_t>{5, 0, 4}));
  EXPECT_THROW(select_per_file(order, sizes, {1, 1}, {}), Error);      // one count per file
  EXPECT_THROW(select_per_file(order, sizes, {1, -1, 1}, {}), Error);  // negative
  EXPECT_THROW(select_per_file(order, sizes, {0, 0, 0}, {}), Error);   // nothing to answer
}

}  // namespace
}  // namespace blockspec
