// Test helpers: the typed SpecConfig, drafter, proposer and engine that
// `--speculative-config {"method": M, "num_speculative_tokens": K, "model": DIR}`
// gives through the CLI (cli/spec_config.cc parses the JSON; its own tests
// are in tests/cli). n-gram lookup here is 1..3 tokens.
#pragma once
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "formats/dflash_config.h"
#include "model/dflash.h"
#include "model/transformer.h"
#include "runtime/engine.h"
#include "runtime/speculative.h"

namespace blockspec {

// Where scripts/fetch_models.sh caches models: $BLOCKSPEC_CACHE, else ~/.cache/blockspec.
inline std::string test_cache_dir() {
  if (const char* c = std::getenv("BLOCKSPEC_CACHE")) return c;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/blockspec";
}

// method: "ngram", or "dflash" / "dflash2" with the drafter in drafter_dir
// (whose config decides between the two, as the CLI does).
inline SpecConfig test_spec(const std::string& method, int64_t K, const std::string& drafter_dir = "") {
  SpecConfig c;
  c.num_speculative_tokens = K;
  if (method == "ngram") {
    c.method = SpecMethod::kNgram;
    c.prompt_lookup_min = 1, c.prompt_lookup_max = 3;
    return c;
  }
  c.model = drafter_dir;
  c.draft = std::make_shared<const DraftConfig>(load_draft_config(drafter_dir));
  c.method = c.draft->method == DraftMethod::kDFlash2 ? SpecMethod::kDFlash2 : SpecMethod::kDFlash;
  return c;
}

inline std::shared_ptr<DraftModel> test_drafter(const SpecConfig& c, Transformer& target,
                                                std::optional<WeightFormat> weights = std::nullopt) {
  if (!c.uses_drafter()) return nullptr;
  return DraftModel::load(c.model, *c.draft, target, DraftOptions{weights, false});
}

inline std::unique_ptr<Proposer> test_proposer(SpecConfig& c, Transformer& target, int64_t capacity,
                                               std::optional<WeightFormat> weights = std::nullopt) {
  return make_proposer(c, test_drafter(c, target, weights), target, capacity);
}

// An engine over `model` with eo.spec's drafter loaded for it.
inline std::unique_ptr<Engine> test_engine(std::unique_ptr<Transformer> model, EngineOptions eo) {
  if (eo.spec) eo.drafter = test_drafter(*eo.spec, *model);
  return std::make_unique<Engine>(std::move(model), eo);
}

}  // namespace blockspec
