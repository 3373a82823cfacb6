// What the CLI commands share about opening a model: the tokenizer for a
// model path (tokenizer.json beside an HF checkpoint, or the GGUF's own
// tokenizer metadata) and the model options common to every command.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"

namespace blockspec {

Tokenizer load_tokenizer(const std::string& model_path);

// A calibration text file: as it is, or for .jsonl the string fields of each line (a blank line between lines).
// Errors name `command`, the file and the line.
std::string read_calib_text(const std::string& path, const std::string& command);

// Flags every model-running command takes: --threads, --isa, --weights,
// --kv-cache-dtype.
std::vector<FlagSpec> model_flags();
// "auto" -> nullopt (ModelOptions::kv_cache_dtype's auto rule); an unknown
// name fails with one line naming `flag` and the valid values.
std::optional<KvDType> parse_kv_cache_dtype(const std::string& flag, const std::string& value);
ModelOptions model_options(const Args& a);
// "N (why)": the model's worker threads and what chose the count (--threads,
// or available_cpus()'s reason), for the start-up / bench lines.
std::string threads_line(const Transformer& model, const ModelOptions& mo);

}  // namespace blockspec
