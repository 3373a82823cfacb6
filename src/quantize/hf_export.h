// What a GGUF input needs to become an HF directory: config.json generated
// from its ModelConfig (HF layout: legacy rope_theta / rope_scaling keys that
// every reader accepts), and tokenizer.json + tokenizer_config.json exported
// from the GGUF's tokenizer.ggml.* metadata (byte-level BPE only: vocab,
// merges, CONTROL tokens as special added tokens, USER_DEFINED as added
// tokens, the pre-tokenizer's split regexes from tokenizer/gguf_vocab.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/hf_config.h"

namespace blockspec {

nlohmann::ordered_json hf_config_json(const ModelConfig& c, bool has_lm_head);

// Writes DIR/tokenizer.json and DIR/tokenizer_config.json; returns notes for the report (e.g. why the tokenizer
// could not be exported, in which case the GGUF itself must be passed where a tokenizer is needed).
std::vector<std::string> export_gguf_tokenizer(const std::string& gguf, const std::string& dir);

}  // namespace blockspec
