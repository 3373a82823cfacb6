// blockspec check DRAFTER [--target TARGET] [--json]: pre-flight check of a
// DFlash / DFlash2 drafter checkpoint (model/dflash_check.h). Exit 0: complete
// and consistent; 1: problems (every one listed, one line each); 2: DRAFTER is
// not a drafter checkpoint, or TARGET cannot be opened.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "model/dflash_check.h"
#include "model/weight_source.h"

namespace blockspec {

namespace {

const std::vector<FlagSpec> kFlags = {
    {"--target", "", true, "the target model (HF directory or GGUF file); only its config is read"},
    {"--json", "", false, "print one JSON object on stdout (human text goes to stderr)"},
    {"--help", "-h", false, "show this help"},
};

nlohmann::json problem_json(const DraftProblem& p) {
  return {{p.is_key ? "key" : "tensor", p.name}, {"message", p.message}};
}

std::string join_ids(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return "[" + s + "]";
}

nlohmann::json summary_json(const DraftCheckInfo& info, const std::vector<DraftProblem>& problems,
                            const std::string& target) {
  nlohmann::json s;
  s["problems"] = problems.size();
  s["warnings"] = info.warnings.size();
  s["target"] = target.empty() ? nlohmann::json(nullptr) : nlohmann::json(target);
  s["target_checked"] = info.target_checked;
  if (!info.config) return s;
  const DraftConfig& d = *info.config;
  s["layers"] = d.base.n_layers;
  s["hidden_size"] = d.base.hidden_size;
  s["target_layer_ids"] = d.target_layer_ids;
  s["block_size"] = d.block_size;
  s["mask_token_id"] = d.mask_token_id;
  s["layer_causal"] = d.layer_causal;
  s["layer_window"] = d.layer_window;
  s["n_tensors"] = info.n_tensors;
  s["total_bytes"] = info.total_bytes;
  nlohmann::json f = nlohmann::json::object();
  for (const auto& [kind, storage] : info.linear_formats) f[kind] = storage;
  s["linear_formats"] = f;
  return s;
}

void print_ok(FILE* h, const std::string& drafter, const DraftCheckInfo& info, const ModelConfig* target) {
  const DraftConfig& d = *info.config;
  std::fprintf(h, "%s: ok: %s drafter, %lld layers, %lld taps %s", drafter.c_str(), draft_method_name(d.method),
               static_cast<long long>(d.base.n_layers), static_cast<long long>(d.n_taps()),
               join_ids(d.target_layer_ids).c_str());
  if (target != nullptr)
    std::fprintf(h, " of a %lld-layer target (hidden %lld)", static_cast<long long>(target->n_layers),
                 static_cast<long long>(target->hidden_size));
  std::fprintf(h, ", block size %lld, mask id %d\n", static_cast<long long>(d.block_size), d.mask_token_id);
  std::string layers;
  for (size_t i = 0; i < d.layer_causal.size(); ++i)
    layers += str_cat(i == 0 ? "" : "; ", i, ": ", d.layer_causal[i] ? "causal" : "non-causal", ", ",
                      d.layer_window[i] > 0 ? str_cat("window ", d.layer_window[i]) : std::string("full attention"));
  std::fprintf(h, "  layers: %s\n", layers.c_str());
  // "fc: <int8 ...>; q_proj, k_proj, ...: BF16": kinds grouped by storage, in drafter order.
  std::vector<std::pair<std::string, std::string>> groups;  // storage -> kinds
  for (const auto& [kind, storage] : info.linear_formats) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == storage; });
    if (it == groups.end()) groups.emplace_back(storage, kind);
    else it->second += ", " + kind;
  }
  std::string formats;
  for (const auto& [storage, kinds] : groups) formats += (formats.empty() ? "" : "; ") + kinds + ": " + storage;
  std::fprintf(h, "  linear layers: %s\n", formats.c_str());
  std::fprintf(h, "  %lld tensors, %llu bytes (%.2f MB)\n", static_cast<long long>(info.n_tensors),
               static_cast<unsigned long long>(info.total_bytes), static_cast<double>(info.total_bytes) / 1e6);
}

}  // namespace

int cmd_check(const std::vector<std::string>& argv) {
  Args a("check", kFlags, argv);
  if (a.has("--help")) {
    std::fputs(Args::usage("check", "DRAFTER [--target TARGET] [--json]", kFlags).c_str(), stdout);
    return 0;
  }
  if (a.positionals().size() != 1) fail("check: expected exactly one DRAFTER (the drafter's checkpoint directory)");
  const std::string drafter = a.positionals()[0];
  const std::string target_path = a.str("--target");
  const bool json = a.has("--json");
  FILE* h = json ? stderr : stdout;

  std::unique_ptr<WeightSource> target;
  if (a.has("--target")) {
    try {
      target = open_weight_source(target_path);
    } catch (const Error& e) {
      std::fprintf(stderr, "blockspec check: error: --target %s\n", e.what());
      return 2;
    }
    if (target->config().is_draft) {
      std::fprintf(stderr,
                   "blockspec check: error: --target %s is a drafter (%s); pass the target model it drafts for\n",
                   target_path.c_str(), target->config().architecture.c_str());
      return 2;
    }
  }
  const ModelConfig* tcfg = target ? &target->config() : nullptr;
  DraftCheckInfo info;
  const std::vector<DraftProblem> problems = check_drafter(drafter, tcfg, &info);

  for (const DraftProblem& p : problems) std::fprintf(h, "problem: %s: %s\n", p.name.c_str(), p.message.c_str());
  for (const DraftProblem& w : info.warnings) std::fprintf(h, "warning: %s: %s\n", w.name.c_str(), w.message.c_str());
  if (problems.empty()) {
    print_ok(h, drafter, info, tcfg);
  } else if (!info.is_checkpoint) {
    std::fprintf(h, "%s: not a drafter checkpoint\n", drafter.c_str());
  } else {
    std::fprintf(h, "%s: %zu problem%s, %zu warning%s: the drafter is not ready (fix the lines above)\n",
                 drafter.c_str(), problems.size(), problems.size() == 1 ? "" : "s", info.warnings.size(),
                 info.warnings.size() == 1 ? "" : "s");
  }
  if (json) {
    nlohmann::json out;
    out["ok"] = problems.empty();
    out["drafter"] = drafter;
    out["method"] = info.config ? nlohmann::json(draft_method_name(info.config->method)) : nlohmann::json(nullptr);
    out["is_checkpoint"] = info.is_checkpoint;
    nlohmann::json ps = nlohmann::json::array(), ws = nlohmann::json::array();
    for (const DraftProblem& p : problems) ps.push_back(problem_json(p));
    for (const DraftProblem& w : info.warnings) ws.push_back(problem_json(w));
    out["problems"] = ps;
    out["warnings"] = ws;
    out["summary"] = summary_json(info, problems, target_path);
    std::printf("%s\n", out.dump().c_str());
  }
  if (!info.is_checkpoint) return 2;
  return problems.empty() ? 0 : 1;
}

}  // namespace blockspec
