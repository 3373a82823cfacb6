// `--speculative-config` as vLLM spells it, parsed into the typed SpecConfig
// the runtime runs from (runtime/spec_config.h), and the drafter it names
// loaded once. The only place that reads that JSON and the drafter's
// config.json.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/dflash.h"
#include "runtime/spec_config.h"

namespace blockspec {

// Parses the JSON object of --speculative-config. The method may be omitted
// when "model" is a drafter: it is then read from the drafter's
// architectures (DFlash2DraftModel -> dflash2); "dflash" naming a DFlash2
// drafter runs it as dflash2 (vLLM does the same). The drafter's config.json
// is read here, once, into cfg.draft. Errors name the key.
// "model" is a drafter directory, or the short name of a drafter shipped in
// the repository's drafters/ (e.g. "smollm2-135m-dflash"), looked up in
// $BLOCKSPEC_DRAFTERS first.
// Every key of vLLM's SpeculativeConfig is honoured, accepted with a note
// (one line each in *notes: it cannot matter here, and why) or refused with
// the reason and what to use instead; an unknown key is an error.
SpecConfig parse_spec_config(const std::string& json_text, std::vector<std::string>* notes = nullptr);

// A short drafter name to its directory (a path, or a name no drafters
// directory holds, is returned as given / fails naming the shipped ones).
std::string resolve_drafter(const std::string& model);

// The drafter cfg names (nullptr for ngram), loaded for `target` from the
// config parse_spec_config read.
std::shared_ptr<DraftModel> load_spec_drafter(const SpecConfig& cfg, Transformer& target);

}  // namespace blockspec
