// `blockspec serve`'s flags as vLLM spells them (`vllm serve --help`
// groups), read into the options the server and engine run from. Every flag
// of vLLM's that blockspec takes is honoured, accepted with a note (it
// cannot matter on this machine: one line saying so), or refused with one
// line naming the flag, why and what to use instead; README.md "Serving
// flags" has the table.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "model/transformer.h"
#include "runtime/engine.h"
#include "server/server.h"

namespace blockspec {

// Every flag serve takes, grouped for --help.
std::vector<FlagSpec> serve_flags();

struct ServeSettings {
  std::string model;  // positional MODEL or --model
  ServerOptions server;
  EngineOptions engine;  // without the drafter (loaded with the model)
  ModelOptions model_opts;
  std::string chat_template_file;
  std::string generation_config = "auto";     // auto | vllm | DIR
  std::string override_generation_config;    // JSON object text, "" = none
  // --gpu-memory-utilization: the fraction of this machine's memory for
  // weights + KV cache + state (the KV budget is computed once the model is
  // loaded: kv_budget_bytes). 0 = unset.
  double memory_fraction = 0;
  std::vector<std::string> notes;  // one line each: accepted flags that cannot matter here, and why
};

// Reads `a` (parsed with serve_flags()); throws Error with one line naming
// the flag for a refused or malformed one.
ServeSettings read_serve_flags(const Args& a);

// Bytes of RAM this process may use: the cgroup's memory.max when set, else
// the machine's physical memory.
int64_t usable_memory_bytes();

// --gpu-memory-utilization's KV + state budget: fraction * memory minus the
// weights (target and drafter) and the hybrid state of max_num_seqs
// sequences. Throws Error when nothing is left.
int64_t kv_budget_bytes(double fraction, int64_t memory, int64_t weight_bytes, int64_t state_bytes);

}  // namespace blockspec
