#include "cli/bench_spec.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "base/error.h"
#include "base/timer.h"
#include "runtime/dflash_proposer.h"

namespace blockspec {

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
}  // namespace

nlohmann::json bench_verify_cost(Transformer& model, Proposer* proposer, const std::vector<int64_t>& ks,
                                 int64_t prompt_len, int64_t repeats) {
  const int64_t V = model.config().vocab_size;
  const bool taps = proposer != nullptr && !proposer->tap_layers().empty();
  const int64_t kmax = *std::max_element(ks.begin(), ks.end());
  KvCache cache = model.new_cache(prompt_len + kmax + 2);
  std::vector<int32_t> prompt(prompt_len), block(kmax + 1);
  for (int64_t i = 0; i < prompt_len; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 13) % V);
  for (int64_t i = 0; i <= kmax; ++i) block[i] = static_cast<int32_t>((i * 104729 + 7) % V);
  std::vector<float> logits, feats;
  model.prefill(prompt.data(), prompt_len, cache, logits, false, taps ? &feats : nullptr);
  // A hybrid model's recurrent state after the prompt, put back between runs (untimed).
  const std::vector<float> state0(cache.state(), cache.state() + cache.state_floats());
  std::vector<double> rollback_t;  // the commit alone, of the last pass_ms
  auto pass_ms = [&](int64_t n) {
    std::vector<double> t;
    rollback_t.clear();
    for (int64_t r = 0; r < repeats + 1; ++r) {
      Timer tm;
      model.forward_batch({Transformer::SeqChunk{block.data(), n, &cache, n > 1, taps ? &feats : nullptr, n > 1}}, logits);
      // A verify keeps a prefix; timed with it, as serving pays it: a dense model crops its KV, a hybrid one
      // also rolls its state back (here half the block accepted).
      Timer tc;
      if (n > 1) model.commit(cache, prompt_len + std::max<int64_t>(1, n / 2));
      if (r > 0) rollback_t.push_back(tc.seconds() * 1e3);
      if (r > 0) t.push_back(tm.seconds() * 1e3);  // the first run warms up
      cache.set_size(prompt_len);
      if (cache.state() != nullptr) {
        std::copy(state0.begin(), state0.end(), cache.state());
        cache.set_state_tokens(prompt_len);
      }
    }
    return median(t);
  };
  DFlashProposer* dp = dynamic_cast<DFlashProposer*>(proposer);
  const double base = pass_ms(1);
  nlohmann::json j;
  j["prompt_len"] = prompt_len;
  j["decode_1_token_ms"] = base;
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t k : ks) {
    nlohmann::json r;
    r["k"] = k;
    r["verify_ms"] = pass_ms(k + 1);
    r["ratio"] = r["verify_ms"].get<double>() / base;
    if (!state0.empty()) {
      // Hybrid models (docs/hybrid.md "rollback by replay"): what the replay costs, against what the other
      // strategy (vLLM's per-token state snapshots) would add: writing the recurrent state once per verified
      // token, timed here as k + 1 copies of it.
      r["rollback_ms"] = median(rollback_t);
      std::vector<float> snap(state0.size());
      std::vector<double> t;
      for (int64_t rr = 0; rr < repeats; ++rr) {
        Timer tm;
        for (int64_t i = 0; i <= k; ++i) std::copy(cache.state(), cache.state() + cache.state_floats(), snap.data());
        t.push_back(tm.seconds() * 1e3);
      }
      r["snapshot_writes_ms"] = median(t);
    }
    if (dp != nullptr && k <= dp->model().config().block_size - 1) {
      // Draft pass for k slots after a prompt_len context (context K/V of the
      // prompt computed once beforehand, as in steady state).
      DraftModel& dm = dp->model();
      DraftCache dc = dm.new_cache(prompt_len + 1);
      std::vector<float> hidden, dl;
      DraftModel::Selection sel;
      dm.forward(dc, feats.data(), prompt_len - 1, prompt[prompt_len - 1], k, hidden);
      std::vector<double> t;
      const int64_t H = dm.config().base.hidden_size;
      for (int64_t rr = 0; rr < repeats; ++rr) {
        Timer tm;
        dm.forward(dc, nullptr, 0, prompt[prompt_len - 1], k, hidden);
        dm.logits(hidden.data() + H, k, dl);
        if (dm.config().method == DraftMethod::kDFlash2) dm.select(hidden.data() + H, dl.data(), k, 0, 0.f, {}, sel);
        t.push_back(tm.seconds() * 1e3);
      }
      r["draft_ms"] = median(t);
      r["draft_ratio"] = r["draft_ms"].get<double>() / base;
    }
    rows.push_back(r);
  }
  j["per_k"] = rows;
  return j;
}

std::vector<std::string> load_prompts(const std::string& path, const std::string& tmpl, int64_t limit) {
  std::ifstream in(path);
  if (!in) fail(path, ": cannot open the prompts file");
  std::vector<std::string> out;
  std::string line;
  int64_t ln = 0;
  while (std::getline(in, line) && static_cast<int64_t>(out.size()) < limit) {
    ++ln;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(path, ":", ln, ": not valid JSON: ", e.what());
    }
    if (!j.is_object()) fail(path, ":", ln, ": expected a JSON object");
    std::string text;
    if (tmpl.empty()) {
      if (j.contains("prompt") && j["prompt"].is_string()) text = j["prompt"];
      else if (j.contains("turns") && j["turns"].is_array() && !j["turns"].empty() && j["turns"][0].is_string())
        text = j["turns"][0];
      else if (j.contains("question") && j["question"].is_string()) text = j["question"];
      else fail(path, ":", ln, ": no \"prompt\", \"turns\" or \"question\" field (or pass --prompt-template)");
    } else {
      size_t i = 0;
      while (i < tmpl.size()) {
        if (tmpl[i] == '{') {
          size_t e = tmpl.find('}', i);
          if (e == std::string::npos) fail("--prompt-template: unclosed '{'");
          const std::string key = tmpl.substr(i + 1, e - i - 1);
          if (!j.contains(key) || !j[key].is_string()) fail(path, ":", ln, ": no string field \"", key, "\"");
          text += j[key].get<std::string>();
          i = e + 1;
        } else if (tmpl[i] == '\\' && i + 1 < tmpl.size() && tmpl[i + 1] == 'n') {
          text += '\n';
          i += 2;
        } else {
          text += tmpl[i++];
        }
      }
    }
    out.push_back(text);
  }
  if (out.empty()) fail(path, ": no prompts");
  return out;
}

nlohmann::json bench_spec_decode(Transformer& model, SpecSetup& spec, const std::vector<std::vector<int32_t>>& prompts,
                                 int64_t gen_len, int64_t repeats) {
  GenerateOptions go;
  go.max_new_tokens = gen_len;
  go.stop_at_eos = false;
  std::vector<double> plain_tps, spec_tps, speedup;
  SpecStats total;
  int64_t passes = 0, tokens = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (int64_t r = 0; r < repeats; ++r) {
      GenerateResult g = generate(model, prompts[p], go);
      SpecResult s =
          generate_speculative(model, *spec.proposer, spec.cfg.num_speculative_tokens, prompts[p], go, {}, spec.ksel.get());
      if (g.tokens != s.gen.tokens)
        fail("bench: speculative output differs from plain greedy decoding on prompt ", p,
             " -- a lossless violation; please report it");
      const double a = static_cast<double>(g.tokens.size()) / g.decode_seconds;
      const double b = static_cast<double>(s.gen.tokens.size()) / s.gen.decode_seconds;
      plain_tps.push_back(a), spec_tps.push_back(b), speedup.push_back(b / a);
      if (r == 0) {
        total.merge(s.stats);
        passes += s.target_passes;
        tokens += static_cast<int64_t>(s.gen.tokens.size());
      }
    }
    std::fprintf(stderr, "prompt %zu/%zu: plain %.2f tok/s, spec %.2f tok/s (x%.2f), acceptance length %.2f\n", p + 1,
                 prompts.size(), plain_tps.back(), spec_tps.back(), speedup.back(), total.mean_acceptance_length());
  }
  nlohmann::json j;
  j["prompts"] = prompts.size();
  j["plain_decode_tok_s_p50"] = median(plain_tps);
  j["spec_decode_tok_s_p50"] = median(spec_tps);
  j["speedup_p50"] = median(speedup);
  j["tokens_per_target_pass"] = passes > 0 ? static_cast<double>(tokens) / passes : 0.0;
  j["lossless_checked"] = true;
  j["spec"] = spec_json(spec.cfg, total);
  return j;
}

}  // namespace blockspec
