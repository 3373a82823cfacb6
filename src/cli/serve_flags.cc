#include "cli/serve_flags.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/model_files.h"
#include "cli/spec_cli.h"
#include "cli/spec_config.h"
#include "server/tool_calls.h"

namespace blockspec {

namespace {


const char* kFrontend = "Frontend (HTTP server)";
const char* kModel = "ModelConfig";
const char* kCache = "CacheConfig";
const char* kParallel = "ParallelConfig";
const char* kScheduler = "SchedulerConfig";
const char* kSpec = "SpeculativeConfig";
const char* kCpu = "blockspec (CPU)";

int64_t in_range(const Args& a, const std::string& flag, int64_t def, int64_t lo, int64_t hi) {
  const int64_t v = a.integer(flag, def);
  if (v < lo || v > hi) fail(flag, " must be in [", lo, ", ", hi, "], found ", v);
  return v;
}

std::string basename_of(const std::string& path) {
  std::filesystem::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  return p.filename().string();
}

// "16106127360", "512M", "16G", "1.5GiB" -> bytes.
int64_t parse_bytes(const std::string& flag, const std::string& s) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = s.substr(used);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mul = 0;
  if (unit.empty() || unit == "b") mul = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mul = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") mul = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") mul = 1024.0 * 1024 * 1024;
  if (used == 0 || mul == 0 || !std::isfinite(v) || v <= 0 || v * mul > 1e15)
    fail(flag, ": expected a positive size in bytes (e.g. 2147483648, 512M or 2G), found \"", s, "\"");
  return static_cast<int64_t>(v * mul);
}

}  // namespace

std::vector<FlagSpec> serve_flags() {
  std::vector<FlagSpec> f = {
      {"--host", "", true, "address to listen on (default 127.0.0.1)", kFrontend},
      {"--port", "", true, "port to listen on; 0 = any free port (default 8000)", kFrontend},
      {"--api-key", "", true, "require \"Authorization: Bearer KEY\" on every endpoint but /health", kFrontend},
      {"--chat-template", "", true, "Jinja chat template file (default: the model's own)", kFrontend},
      {"--enable-auto-tool-choice", "", false,
       "chat requests with tools and tool_choice \"auto\" get the model's tool calls as tool_calls (needs "
       "--tool-call-parser)", kFrontend},
      {"--tool-call-parser", "", true,
       "hermes (<tool_call>{json}</tool_call>: Qwen2.5, Qwen3, Hermes), qwen3_coder or qwen3_xml "
       "(<function=...><parameter=...>: Qwen3-Coder, Qwen3.5)", kFrontend},
      {"--reasoning-parser", "", true,
       "qwen3: chat answers carry the <think> ... </think> span as reasoning_content (streamed too), the rest as "
       "content", kFrontend},
      {"--uvicorn-log-level", "", true,
       "critical, error, warning: no per-request lines; info, debug, trace: one line per HTTP request", kFrontend},
      {"--log-requests", "", false, "one line per HTTP request on stderr", kFrontend},
      {"--enable-log-requests", "", false, "the same as --log-requests (vLLM's name)", kFrontend},
      {"--disable-log-requests", "", false, "no per-request lines (the default)", kFrontend},
      {"--help", "-h", false, "show this help", kFrontend},
      {"--model", "", true, "the model: an HF directory or a .gguf file (or give it as the positional MODEL)", kModel},
      {"--served-model-name", "", true, "model name clients pass as \"model\" (default: the model path's basename)",
       kModel},
      {"--dtype", "", true,
       "auto or float32: f32 activations (the default); bfloat16: activations rounded to bf16 where transformers "
       "rounds them for a bf16 model (= --activations bf16); weights stay as stored; float16 is refused",
       kModel},
      {"--max-model-len", "", true, "longest prompt + completion in tokens (default: the model's max_position_embeddings)",
       kModel},
      {"--seed", "", true,
       "seed of the per-request seeds given to requests without \"seed\": a rerun of the same requests in the same "
       "order samples the same tokens (default: random per server)",
       kModel},
      {"--generation-config", "", true,
       "auto: the model's generation_config.json sets the defaults of temperature, top_p, top_k, max_tokens and "
       "adds its eos_token_id as stop tokens; vllm: built-in defaults; or a directory holding one (default auto)",
       kModel},
      {"--override-generation-config", "", true,
       "JSON object over the generation config, e.g. '{\"temperature\": 0.5}' (generation_config.json's keys)", kModel},
      {"--trust-remote-code", "", false, "accepted: blockspec runs no code from checkpoints", kModel},
      {"--max-logprobs", "", true, "the most logprobs / top_logprobs a request may ask for (default 20; -1: no limit)",
       kModel},
      {"--language-model-only", "", false, "accepted: blockspec loads the language model only", kModel},
      {"--gpu-memory-utilization", "", true,
       "fraction of this machine's memory (RAM, or the cgroup limit) for weights, KV cache and state; the KV "
       "cache gets what the weights leave (token capacity logged)",
       kCache},
      {"--kv-cache-memory", "", true, "KV cache budget in MiB (default: room for max-num-seqs x max-model-len tokens, "
                                      "at most 2 GiB)", kCache},
      {"--kv-cache-memory-bytes", "", true, "KV cache budget in bytes (512M, 2G, ...; vLLM's name)", kCache},
      {"--enable-prefix-caching", "", false,
       "reuse the KV pages of prompt prefixes seen before (the default; off for hybrid targets, logged; a DFlash "
       "drafter's context is kept beside each page)", kCache},
      {"--no-enable-prefix-caching", "", false, "compute every prompt in full", kCache},
      {"--tensor-parallel-size", "-tp", true, "1 (a single CPU process; larger sizes are refused)", kParallel},
      {"--pipeline-parallel-size", "-pp", true, "1 (larger sizes are refused)", kParallel},
      {"--data-parallel-size", "-dp", true, "1 (larger sizes are refused: run one server per replica)", kParallel},
      {"--max-num-seqs", "", true, "sequences batched per step (default 8)", kScheduler},
      {"--max-num-batched-tokens", "", true, "tokens one engine step forwards (default 256)", kScheduler},
  };
  FlagSpec s = spec_flag();
  s.group = kSpec;
  f.push_back(s);
  std::vector<FlagSpec> cpu;
  for (FlagSpec m : model_flags()) {
    if (m.name == "--kv-cache-dtype" || m.name == "--mamba-ssm-cache-dtype") {  // into CacheConfig
      m.group = kCache;
      auto last_cache = std::find_if(f.rbegin(), f.rend(), [](const FlagSpec& x) { return x.group == kCache; });
      f.insert(last_cache.base(), m);
    } else {
      m.group = kCpu;
      cpu.push_back(m);
    }
  }
  f.insert(f.end(), cpu.begin(), cpu.end());
  return f;
}

ServeSettings read_serve_flags(const Args& a) {
  ServeSettings s;
  auto note = [&](const std::string& flag, const std::string& why) { s.notes.push_back(flag + ": " + why); };
  // The model: positional (vllm serve MODEL) or --model; both must agree.
  if (a.positionals().size() > 1)
    fail("serve: expected one MODEL (an HF directory or a .gguf file), found ", a.positionals().size(), " arguments");
  const std::string pos = a.positionals().empty() ? "" : a.positionals()[0];
  const std::string flag = a.str("--model", "");
  if (!pos.empty() && !flag.empty() && pos != flag)
    fail("serve: the model is given twice, as ", pos, " and as --model ", flag, "; give one");
  s.model = pos.empty() ? flag : pos;
  if (s.model.empty()) fail("serve: no model: give MODEL (an HF directory or a .gguf file) or --model");

  // Parallelism: one CPU process.
  for (const char* p : {"--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size"}) {
    const int64_t n = in_range(a, p, 1, 1, 1 << 20);
    if (n != 1)
      fail(p, " ", n, ": blockspec serves from one process on this machine's CPU and has no backend that splits "
           "a model or replicates it; use 1 (run one server per replica)");
  }
  ServerOptions& so = s.server;
  // Tool calls: vLLM's pair of flags, each useless without the other.
  so.enable_auto_tool_choice = a.has("--enable-auto-tool-choice");
  so.tool_call_parser = a.str("--tool-call-parser", "");
  if (a.has("--tool-call-parser") && !tool_call_format(so.tool_call_parser))
    fail("--tool-call-parser: \"", so.tool_call_parser, "\" is not supported (supported: ", kToolCallParsers, ")");
  if (so.enable_auto_tool_choice && so.tool_call_parser.empty())
    fail("--enable-auto-tool-choice: needs --tool-call-parser (", kToolCallParsers, ")");

  so.host = a.str("--host", "127.0.0.1");
  so.port = static_cast<int>(in_range(a, "--port", 8000, 0, 65535));
  so.served_model_name = a.str("--served-model-name", basename_of(s.model));
  so.api_key = a.str("--api-key", "");
  if (a.has("--seed")) so.seed = a.u64("--seed", 0);
  so.reasoning_parser = a.str("--reasoning-parser", "");
  if (a.has("--reasoning-parser") && so.reasoning_parser != "qwen3")
    fail("--reasoning-parser: \"", so.reasoning_parser, "\" is not supported (supported: qwen3, the <think> ... "
         "</think> span of Qwen3 / Qwen3.5 answers)");
  // Request logging: --log-requests / --enable-log-requests, or uvicorn's
  // info level (its access log); --disable-log-requests wins.
  const std::string level = a.str("--uvicorn-log-level", "");
  if (!level.empty() && level != "critical" && level != "error" && level != "warning" && level != "info" &&
      level != "debug" && level != "trace")
    fail("--uvicorn-log-level: \"", level, "\" (expected critical, error, warning, info, debug or trace)");
  so.log_requests = a.has("--log-requests") || a.has("--enable-log-requests") || level == "info" ||
                    level == "debug" || level == "trace";
  if (a.has("--disable-log-requests")) {
    if (a.has("--log-requests") || a.has("--enable-log-requests"))
      fail("--disable-log-requests contradicts --log-requests / --enable-log-requests; give one");
    so.log_requests = false;
  }

  EngineOptions& eo = s.engine;
  eo.max_num_seqs = in_range(a, "--max-num-seqs", 8, 1, 1024);
  eo.max_model_len = in_range(a, "--max-model-len", 0, 0, int64_t{1} << 30);
  if (a.has("--max-model-len") && eo.max_model_len == 0) fail("--max-model-len must be >= 1, found 0");
  eo.max_step_tokens = in_range(a, "--max-num-batched-tokens", 256, 16, int64_t{1} << 20);
  if (a.has("--kv-cache-memory") && a.has("--kv-cache-memory-bytes"))
    fail("--kv-cache-memory and --kv-cache-memory-bytes both set the KV budget; give one");
  eo.kv_cache_mb = in_range(a, "--kv-cache-memory", 0, 0, int64_t{1} << 24);
  if (a.has("--kv-cache-memory") && eo.kv_cache_mb == 0) fail("--kv-cache-memory must be >= 1 MiB, found 0");
  if (a.has("--kv-cache-memory-bytes"))
    eo.kv_cache_mb = std::max<int64_t>(1, parse_bytes("--kv-cache-memory-bytes", a.str("--kv-cache-memory-bytes")) >> 20);
  if (a.has("--gpu-memory-utilization")) {
    s.memory_fraction = a.number("--gpu-memory-utilization", 0);
    if (!(s.memory_fraction > 0 && s.memory_fraction <= 1))
      fail("--gpu-memory-utilization must be in (0, 1], found ", a.str("--gpu-memory-utilization"));
    if (eo.kv_cache_mb > 0) {
      note("--gpu-memory-utilization", "the KV budget is the one --kv-cache-memory(-bytes) gives (as in vLLM)");
      s.memory_fraction = 0;
    }
  }
  if (a.has("--speculative-config")) {
    std::vector<std::string> spec_notes;
    eo.spec = parse_spec_config(a.str("--speculative-config"), &spec_notes);
    for (const std::string& n : spec_notes) note("--speculative-config", n);
  }
  so.n_http_threads = static_cast<int>(std::max<int64_t>(64, 4 * eo.max_num_seqs + 16));

  s.model_opts = model_options(a);
  const std::string dtype = a.str("--dtype", "auto");
  if (dtype == "bfloat16" || dtype == "bf16") {
    if (a.has("--activations") && a.str("--activations") != "bf16")
      fail("--dtype ", dtype, " contradicts --activations ", a.str("--activations"), "; give one");
    s.model_opts.emulate_bf16_activations = true;
  } else if (dtype == "float32" || dtype == "float") {
    if (a.has("--activations") && a.str("--activations") != "f32")
      fail("--dtype ", dtype, " contradicts --activations ", a.str("--activations"), "; give one");
  } else if (dtype == "float16" || dtype == "half") {
    fail("--dtype ", dtype, ": blockspec has no fp16 compute on the CPU; use bfloat16 or float32");
  } else if (dtype != "auto") {
    fail("--dtype: \"", dtype, "\" (expected auto, bfloat16 or float32)");
  }

  s.chat_template_file = a.str("--chat-template", "");
  if (!s.chat_template_file.empty() && !std::filesystem::exists(s.chat_template_file))
    fail("--chat-template: ", s.chat_template_file, " does not exist");
  s.generation_config = a.str("--generation-config", "auto");
  if (s.generation_config != "auto" && s.generation_config != "vllm" && !std::filesystem::is_directory(s.generation_config))
    fail("--generation-config must be auto, vllm or a directory holding generation_config.json, found ",
         quote_for_message(s.generation_config));
  s.override_generation_config = a.str("--override-generation-config", "");
  if (a.has("--override-generation-config")) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(s.override_generation_config);
    } catch (const nlohmann::json::exception& e) {
      fail("--override-generation-config: not valid JSON: ", e.what());
    }
    if (!j.is_object()) fail("--override-generation-config: expected a JSON object, e.g. '{\"temperature\": 0.5}'");
  }

  if (a.has("--trust-remote-code")) note("--trust-remote-code", "accepted; blockspec runs no code from checkpoints");
  if (a.has("--language-model-only"))
    note("--language-model-only", "accepted; blockspec loads the language model only (no vision or audio towers)");
  // vLLM: -1 = no cap (the vocabulary).
  const int64_t max_lp = in_range(a, "--max-logprobs", 20, -1, 1 << 30);
  s.server.max_logprobs = max_lp < 0 ? (1 << 30) : static_cast<int>(max_lp);
  if (a.has("--enable-prefix-caching") && a.has("--no-enable-prefix-caching"))
    fail("--enable-prefix-caching contradicts --no-enable-prefix-caching; give one");
  s.engine.enable_prefix_caching = !a.has("--no-enable-prefix-caching");  // on by default, as in vLLM
  return s;
}

int64_t usable_memory_bytes() {
  int64_t mem = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  std::ifstream f("/sys/fs/cgroup/memory.max");  // cgroup v2; "max" = no limit
  std::string v;
  if (f >> v && v != "max") {
    try {
      mem = std::min<int64_t>(mem, std::stoll(v));
    } catch (const std::exception&) {
    }
  }
  return mem;
}

int64_t kv_budget_bytes(double fraction, int64_t memory, int64_t weight_bytes, int64_t state_bytes) {
  const double left = fraction * static_cast<double>(memory) - static_cast<double>(weight_bytes + state_bytes);
  if (left <= 0)
    fail("--gpu-memory-utilization ", fraction, ": ", fraction, " x ", memory >> 20, " MiB leaves nothing for the KV "
         "cache after the weights (", weight_bytes >> 20, " MiB) and state (", state_bytes >> 20, " MiB); raise it");
  return static_cast<int64_t>(left);
}

}  // namespace blockspec
