// See drafter_calibration.h.
#include "quantize/drafter_calibration.h"

#include <chrono>
#include <cstdio>
#include <memory>

#include "base/error.h"
#include "model/dflash.h"
#include "model/dflash_check.h"
#include "model/transformer.h"
#include "model/weight_source.h"

namespace blockspec {

void check_drafter_against_target(const std::string& drafter_dir, const std::string& target_path) {
  const ModelConfig tc = open_weight_source(target_path)->config();
  const std::vector<DraftProblem> problems = check_drafter(drafter_dir, &tc);
  if (problems.empty()) return;
  const DraftProblem& p = problems[0];
  fail("drafter ", drafter_dir, " does not fit --target ", target_path, ": ", p.name, ": ", p.message,
       problems.size() > 1 ? str_cat(" (and ", problems.size() - 1, " more: blockspec check ", drafter_dir,
                                     " --target ", target_path, ")")
                           : std::string());
}

namespace {

// Rows of one input, buffered so that X^T X runs on a few hundred rows at a time (a block is only block_size rows).
struct Accumulator {
  std::vector<std::string> modules;
  int64_t cols = 0, rows = 0;
  std::vector<double> H;    // [cols, cols], lower triangle until finished
  std::vector<float> buf;   // [pending rows, cols]
};

constexpr int64_t kFlushRows = 256;

void flush(const OpContext& ctx, Accumulator& a) {
  const int64_t n = static_cast<int64_t>(a.buf.size()) / a.cols;
  if (n == 0) return;
  accumulate_hessian(ctx, a.buf.data(), n, a.cols, a.H);
  a.buf.clear();
}

}  // namespace

DrafterCalibration calibrate_drafter(const std::string& drafter_dir, const std::string& target_path,
                                     const std::vector<std::vector<int32_t>>& windows,
                                     const std::function<bool(const std::string&)>& needs,
                                     const DrafterCalibOptions& opts) {
  if (opts.anchor_stride <= 0) fail("drafter calibration: anchor stride must be > 0");
  ModelOptions mo;
  mo.n_threads = opts.n_threads;  // the target's stored precision: the taps it gives when it serves
  std::unique_ptr<Transformer> target = Transformer::load(target_path, mo);
  DraftOptions dopt;
  dopt.weights = WeightFormat::kF32;  // the original drafter weights, exactly
  std::unique_ptr<DraftModel> draft = DraftModel::load(drafter_dir, *target, dopt);
  const DraftConfig& dc = draft->config();
  target->set_tap_layers(dc.target_layer_ids);  // as runtime/speculative.cc load_drafter
  const int64_t V = target->config().vocab_size, B = dc.block_size;
  const int64_t tap_w = dc.n_taps() * target->config().hidden_size;
  const OpContext ctx = target->op_context();

  std::map<std::string, Accumulator> acc;  // by the first module of each input
  draft->set_observer([&](const std::vector<std::string>& modules, const float* x, int64_t n, int64_t cols) {
    auto it = acc.find(modules[0]);
    if (it == acc.end()) {
      bool want = false;
      for (const std::string& m : modules) want = want || needs(m);
      if (!want) return;
      it = acc.emplace(modules[0], Accumulator{modules, cols, 0, {}, {}}).first;
    }
    Accumulator& a = it->second;
    a.buf.insert(a.buf.end(), x, x + n * cols);
    a.rows += n;
    if (static_cast<int64_t>(a.buf.size()) >= kFlushRows * cols) flush(ctx, a);
  });

  DrafterCalibration out;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits, taps, hidden;
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    const std::vector<int32_t>& w = windows[wi];
    const int64_t T = static_cast<int64_t>(w.size());
    for (int32_t id : w)
      if (id < 0 || id >= V) fail("drafter calibration: token id ", id, " outside the target vocabulary (", V, ")");
    if (T < 2) continue;  // no anchor with context
    KvCache kv = target->new_cache(T);
    target->prefill(w.data(), T, kv, logits, false, &taps);  // taps: [T, n_taps * H]
    DraftCache cache = draft->new_cache(T + B);
    int64_t seen = 0;  // context tokens already in the draft cache
    for (int64_t a = 1; a < T; a += opts.anchor_stride) {
      draft->forward(cache, taps.data() + seen * tap_w, a - seen, w[a], B - 1, hidden);
      seen = a;
      ++out.n_blocks;
    }
    if (opts.progress)
      std::fprintf(stderr, "calibrate drafter: window %zu/%zu at %.0f s\n", wi + 1, windows.size(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  draft->set_observer({});
  if (out.n_blocks == 0) fail("drafter calibration: no block ran (windows need at least 2 tokens)");
  for (auto& [key, a] : acc) {
    flush(ctx, a);
    finish_hessian(a.H, a.cols);
    auto h = std::make_shared<std::vector<double>>(std::move(a.H));
    for (const std::string& m : a.modules) {
      out.hessians[m] = h;
      out.rows[m] = a.rows;
    }
  }
  return out;
}

}  // namespace blockspec
