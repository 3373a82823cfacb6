#include "cli/spec_config.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/error.h"
#include "formats/dflash_config.h"

namespace blockspec {

using nlohmann::json;

std::vector<std::string> drafter_dirs() {
  std::vector<std::string> d;
  if (const char* e = std::getenv("BLOCKSPEC_DRAFTERS"); e != nullptr && *e != '\0') d.push_back(e);
#ifdef BS_DRAFTERS_DIR
  d.push_back(BS_DRAFTERS_DIR);
#endif
  return d;
}

std::string resolve_drafter(const std::string& model) {
  namespace fs = std::filesystem;
  if (model.empty() || model.find('/') != std::string::npos || fs::exists(model)) return model;
  std::string known;
  for (const std::string& dir : drafter_dirs()) {
    const fs::path p = fs::path(dir) / model;
    if (is_draft_checkpoint(p.string())) return p.string();
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (is_draft_checkpoint(e.path().string())) known += (known.empty() ? "" : ", ") + e.path().filename().string();
  }
  fail("--speculative-config: \"model\" ", model, " is neither a directory nor a shipped drafter (shipped: ",
       known.empty() ? "none found" : known, ")");
}

SpecConfig parse_spec_config(const std::string& text) {
  const char* what = "--speculative-config";
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(what, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail(what, ": expected a JSON object, e.g. {\"method\":\"dflash\",\"model\":DIR}");
  std::string method, model, draft_sample = "probabilistic";
  std::optional<int64_t> k, lookup_min, lookup_max;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    auto str = [&] {
      if (!v.is_string()) fail(what, ": \"", key, "\" must be a string, found ", v.dump());
      return v.get<std::string>();
    };
    auto pos_int = [&] {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1024)
        fail(what, ": \"", key, "\" must be an integer in [1, 1024], found ", v.dump());
      return v.get<int64_t>();
    };
    if (key == "method") method = str();
    else if (key == "model") model = str();
    else if (key == "num_speculative_tokens") k = pos_int();
    else if (key == "prompt_lookup_max") lookup_max = pos_int();
    else if (key == "prompt_lookup_min") lookup_min = pos_int();
    else if (key == "draft_sample_method") draft_sample = str();
    else
      fail(what, ": unknown key \"", key,
           "\" (known: method, model, num_speculative_tokens, prompt_lookup_max, prompt_lookup_min, "
           "draft_sample_method)");
  }
  if (method != "ngram") model = resolve_drafter(model);  // a short name of a shipped drafter
  if (method.empty() && !model.empty() && is_draft_checkpoint(model)) method = "dflash";  // refined below
  if (method.empty()) fail(what, ": missing \"method\" (dflash, dflash2 or ngram)");
  if (method != "dflash" && method != "dflash2" && method != "ngram")
    fail(what, ": method \"", method, "\" is not supported (supported: dflash, dflash2, ngram)");
  if (draft_sample != "probabilistic" && draft_sample != "greedy")
    fail(what, ": draft_sample_method must be \"probabilistic\" or \"greedy\", found \"", draft_sample, "\"");
  SpecConfig c;
  c.num_speculative_tokens = k.value_or(0);
  c.greedy_draft = draft_sample == "greedy";
  if (method == "ngram") {
    if (!model.empty()) fail(what, ": method ngram takes no \"model\"");
    // vLLM's defaults: prompt_lookup_min 1; prompt_lookup_max 5, or min when min > 5.
    c.method = SpecMethod::kNgram;
    c.prompt_lookup_min = lookup_min.value_or(1);
    c.prompt_lookup_max = lookup_max.value_or(std::max<int64_t>(c.prompt_lookup_min, 5));
    if (c.prompt_lookup_max < c.prompt_lookup_min)
      fail(what, ": prompt_lookup_max ", c.prompt_lookup_max, " < prompt_lookup_min ", c.prompt_lookup_min);
    return c;
  }
  if (model.empty()) fail(what, ": method ", method, " needs \"model\": the drafter directory");
  if (lookup_min || lookup_max) fail(what, ": prompt_lookup_max / prompt_lookup_min apply to method ngram only");
  if (!is_draft_checkpoint(model))
    fail(what, ": \"model\" ", model, " is not a DFlash drafter (no config.json naming DFlashDraftModel or "
               "DFlash2DraftModel)");
  c.model = model;
  c.draft = std::make_shared<const DraftConfig>(load_draft_config(model));
  // The drafter's architectures decide between dflash and dflash2.
  c.method = c.draft->method == DraftMethod::kDFlash2 ? SpecMethod::kDFlash2 : SpecMethod::kDFlash;
  if (k && *k > c.draft->block_size - 1)
    fail(what, ": num_speculative_tokens ", *k, " exceeds block_size - 1 = ", c.draft->block_size - 1, " of ", model,
         " (more masks than it was trained for)");
  return c;
}

std::shared_ptr<DraftModel> load_spec_drafter(const SpecConfig& cfg, Transformer& target) {
  if (!cfg.uses_drafter()) return nullptr;
  if (!cfg.draft) fail("--speculative-config: the drafter config of ", cfg.model, " was not read");
  return DraftModel::load(cfg.model, *cfg.draft, target, DraftOptions{std::nullopt, false});
}

}  // namespace blockspec
