#include "cli/model_files.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/thread_pool.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "model/weight_source.h"
#include "tokenizer/gguf_vocab.h"

namespace blockspec {

Tokenizer load_tokenizer(const std::string& model_path) {
  const std::string gguf = gguf_path_of(model_path);
  if (gguf.empty()) return Tokenizer::from_file(model_path + "/tokenizer.json");
  GgufFile f(gguf);
  GgufTokenizerData d = gguf_tokenizer(f);
  GgufVocab v;
  v.model = d.model;
  v.pre = d.pre;
  v.tokens = d.tokens;
  v.token_types = d.token_types;
  v.merges = d.merges;
  v.bos = d.bos_token_id;
  v.eos = d.eos_token_id;
  v.pad = d.padding_token_id;
  v.unk = d.unknown_token_id;
  v.add_bos = d.add_bos_token.value_or(false);
  v.add_eos = d.add_eos_token.value_or(false);
  return Tokenizer::from_gguf_vocab(v, gguf);
}

std::optional<KvDType> parse_kv_cache_dtype(const std::string& flag, const std::string& value) {
  if (value == "auto") return std::nullopt;
  // vLLM's spellings of dtypes blockspec stores (vLLM's fp8 is e4m3).
  const std::string name = value == "bfloat16" ? "bf16" : value == "fp8" ? "fp8_e4m3" : value == "float32" ? "f32" : value;
  auto t = kv_dtype_from_name(name);
  if (!t && (value == "float16" || value == "half"))
    fail(flag, ": \"", value, "\" is not supported: blockspec has no fp16 KV cache on the CPU (use bfloat16)");
  if (!t)
    fail(flag, ": unknown KV cache dtype \"", value, "\" (expected auto, ", kv_dtype_names(),
         "; vLLM's bfloat16 and fp8 (= fp8_e4m3) too)");
  return t;
}

std::vector<FlagSpec> model_flags() {
  return {
      {"--threads", "-t", true, "worker threads (default: the CPUs this process may use: affinity mask and cgroup quota)"},
      {"--isa", "", true, "kernel ISA: auto, ref, avx2, avx512 (default: $BLOCKSPEC_ISA or auto)"},
      {"--weights", "", true, "weight format: f32, bf16, q8, q4, fp8, nvfp4, mxfp4 (default: each tensor's stored format)"},
      {"--activations", "", true,
       "activation precision: f32 (default) or bf16 (round activations to bf16 where transformers does for a "
       "bf16 model; bf16 weights then run on AVX-512 BF16 dot products where the CPU has them)"},
      {"--kv-cache-dtype", "", true,
       "KV cache dtype: auto, f32, bf16, fp8_e4m3, int8_per_token_head, int8_block_g128 (default auto: bf16 when "
       "every weight matrix is bf16, else f32; see docs/kv_cache.md)"},
      {"--gdn-prefill", "", true,
       "hybrid models: recurrent (default: the state never depends on how prompts were split into steps) or "
       "chunked (the chunked delta rule for prefill chunks: faster, equal up to summation order)"},
      {"--mamba-ssm-cache-dtype", "", true,
       "recurrent-state dtype of hybrid (Gated DeltaNet) models, as vLLM spells it: auto or float32 (the default; "
       "bf16 states drift from the f32 recurrence, hybrid.md §6)"},
  };
}

ModelOptions model_options(const Args& a) {
  ModelOptions mo;
  const int64_t threads = a.integer("--threads", 0);
  if (threads < 0 || threads > 1024) fail("--threads must be in [0, 1024], found ", threads);
  mo.n_threads = static_cast<int>(threads);
  const char* env_isa = std::getenv("BLOCKSPEC_ISA");
  mo.isa = a.str("--isa", env_isa ? env_isa : "");
  if (a.has("--weights")) {
    auto f = weight_format_from_name(a.str("--weights"));
    if (!f) fail("--weights: unknown format \"", a.str("--weights"), "\" (expected f32, bf16, q8, q4, fp8, nvfp4 or mxfp4)");
    mo.weights = f;
  }
  mo.kv_cache_dtype = parse_kv_cache_dtype("--kv-cache-dtype", a.str("--kv-cache-dtype", "auto"));
  const std::string ssm = a.str("--mamba-ssm-cache-dtype", "auto");
  if (ssm != "auto" && ssm != "float32")
    fail("--mamba-ssm-cache-dtype: \"", ssm, "\" is not supported (blockspec keeps recurrent state in float32: use "
         "auto or float32)");
  const std::string gp = a.str("--gdn-prefill", "recurrent");
  if (gp != "recurrent" && gp != "chunked") fail("--gdn-prefill: \"", gp, "\" (expected recurrent or chunked)");
  mo.gdn_chunked_prefill = gp == "chunked";
  const std::string act = a.str("--activations", "f32");
  if (act != "f32" && act != "bf16") fail("--activations: unknown precision \"", act, "\" (expected f32 or bf16)");
  mo.emulate_bf16_activations = act == "bf16";
  mo.progress = true;
  return mo;
}


std::string threads_line(const Transformer& model, const ModelOptions& mo) {
  return str_cat(model.n_threads(), " (", mo.n_threads > 0 ? std::string("--threads") : available_cpus().why, ")");
}

std::string read_calib_text(const std::string& path, const std::string& command) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(command, ": --calib ", path, ": cannot open (", std::strerror(errno), ")");
  std::ostringstream s;
  s << f.rdbuf();
  std::string text = s.str();
  if (path.size() < 6 || path.substr(path.size() - 6) != ".jsonl") return text;
  std::string out, line;
  std::istringstream in(text);
  int64_t ln = 0;
  while (std::getline(in, line)) {
    ++ln;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      fail(command, ": --calib ", path, ":", ln, ": invalid JSON (", e.what(), ")");
    }
    for (const auto& [k, v] : j.items())
      if (v.is_string()) out += v.get<std::string>() + "\n";
    out += "\n";
  }
  return out;
}

}  // namespace blockspec
