// Pre-flight check of a DFlash / DFlash2 drafter checkpoint (`blockspec
// check`): every tensor of ../shared/docs/dflash.md §1.2 present with the
// shape its config implies, quantized modules complete (validated by the
// quantized loader), dense tensors in F32/BF16/F16, and -- given the target's
// config -- the checks of dflash.md §6-7 that turn into 0% acceptance or a
// crash at run time: fc input width = taps x target hidden, every tap below
// the target's depth, mask_token_id inside the target vocab, no fp16 DFlash2.
//
// Nothing here throws for a broken checkpoint: each finding is one
// DraftProblem naming the tensor or config key, what was found and the fix.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "formats/dflash_config.h"
#include "formats/hf_config.h"

namespace blockspec {

struct DraftProblem {
  std::string name;     // tensor ("fc.weight"), module ("fc") or config key ("dflash_config.mask_token_id")
  std::string message;  // one line: what is wrong and the fix
  bool is_key = false;  // name is a config key (or the path), not a tensor
};

// What the check saw, for the summary line and `--json`.
struct DraftCheckInfo {
  // False when the path is not a drafter checkpoint at all (missing, a file,
  // no config.json or no safetensors, config.json of a non-drafter): the
  // single problem then says why (exit code 2 in the CLI).
  bool is_checkpoint = true;
  bool target_checked = false;          // target-dependent checks ran
  std::optional<DraftConfig> config;    // when config.json parsed
  std::vector<DraftProblem> warnings;   // extra tensors, skipped checks: not failures
  int64_t n_tensors = 0;                // stored tensors (scales and codes counted apart)
  uint64_t total_bytes = 0;             // of the stored tensor data
  // Storage of each kind of linear layer ("fc", "q_proj", ...), in drafter
  // order: "BF16", "compressed-tensors int-quantized int8 per-channel", ...
  // Several formats of one kind are joined with " + ".
  std::vector<std::pair<std::string, std::string>> linear_formats;
};

// Checks DIR against its own config.json and, when `target` is given, against
// the target model's config. Returns every problem found (empty: the drafter
// is complete and consistent); `info`, when given, receives the rest.
std::vector<DraftProblem> check_drafter(const std::string& dir, const ModelConfig* target,
                                        DraftCheckInfo* info = nullptr);

}  // namespace blockspec
