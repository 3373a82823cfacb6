#include "server/generation_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace blockspec {

using json = nlohmann::json;

namespace {

constexpr const char* kFix = "; fix the file or start the server with --generation-config vllm";

std::string shown(const json& v) {  // a value in an error message: short, one line
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// The value of `key`, or nullptr when absent or null (HF writes nulls).
const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number(const json& j, const char* key, const std::string& file, double lo, double hi,
                             bool lo_open) {
  const json* v = field(j, key);
  if (!v) return std::nullopt;
  const bool ok = v->is_number() && std::isfinite(v->get<double>()) && v->get<double>() <= hi &&
                  (lo_open ? v->get<double>() > lo : v->get<double>() >= lo);
  if (!ok) fail(file, ": '", key, "' must be a number in ", lo_open ? "(" : "[", lo, ", ", hi, "], found ", shown(*v), kFix);
  return v->get<double>();
}

std::optional<int64_t> integer(const json& j, const char* key, const std::string& file, int64_t lo, int64_t hi) {
  const json* v = field(j, key);
  if (!v) return std::nullopt;
  const bool ok = v->is_number_integer() && !(v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(hi)) &&
                  v->get<int64_t>() >= lo && v->get<int64_t>() <= hi;
  if (!ok) fail(file, ": '", key, "' must be an integer in [", lo, ", ", hi, "], found ", shown(*v), kFix);
  return v->get<int64_t>();
}

std::vector<int32_t> token_ids(const json& j, const char* key, const std::string& file, int64_t vocab) {
  const json* v = field(j, key);
  if (!v) return {};
  const json list = v->is_array() ? *v : json::array({*v});
  std::vector<int32_t> ids;
  for (const json& x : list) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab)
      fail(file, ": '", key, "' must be a token id or a list of token ids in [0, ", vocab, "), found ", shown(*v), kFix);
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

RequestDefaults parse_generation_config(const json& j, const std::string& file, int64_t vocab_size) {
  if (!j.is_object()) fail(file, ": expected a JSON object, found ", shown(j), kFix);
  RequestDefaults d;
  d.source = file;
  if (auto t = number(j, "temperature", file, 0, 100, false)) d.temperature = static_cast<float>(*t);
  if (auto p = number(j, "top_p", file, 0, 1, true)) d.top_p = static_cast<float>(*p);
  if (auto k = integer(j, "top_k", file, -1, int64_t{1} << 30)) d.top_k = *k < 0 ? 0 : static_cast<int>(*k);
  if (auto m = integer(j, "max_new_tokens", file, 1, int64_t{1} << 40)) d.max_tokens = *m;
  d.eos_token_ids = token_ids(j, "eos_token_id", file, vocab_size);
  // vLLM also takes these two; say so rather than pretend to apply them.
  if (auto r = number(j, "repetition_penalty", file, 0, 1e9, true); r && *r != 1.0)
    d.ignored.push_back("repetition_penalty " + num(*r));
  if (auto p = number(j, "min_p", file, 0, 1, false); p && *p != 0.0) d.ignored.push_back("min_p " + num(*p));
  return d;
}

RequestDefaults load_request_defaults(const std::string& mode, const std::string& model_path, int64_t vocab_size,
                                      const std::string& overrides) {
  namespace fs = std::filesystem;
  json over;  // --override-generation-config: its keys replace the file's
  if (!overrides.empty()) {
    try {
      over = json::parse(overrides);
    } catch (const json::exception& e) {
      fail("--override-generation-config: not valid JSON: ", e.what());
    }
    if (!over.is_object()) fail("--override-generation-config: expected a JSON object, found ", shown(over));
  }
  std::string file;
  if (mode == "auto") {
    if (fs::is_directory(model_path) && fs::exists(model_path + "/generation_config.json"))
      file = model_path + "/generation_config.json";
  } else if (mode != "vllm") {
    if (!fs::is_directory(mode))
      fail("--generation-config must be auto, vllm or a directory holding generation_config.json, found ",
           quote_for_message(mode));
    file = mode + "/generation_config.json";
    if (!fs::exists(file)) fail("--generation-config: ", file, " does not exist");
  }
  if (file.empty())
    return over.is_object() ? parse_generation_config(over, "--override-generation-config", vocab_size)
                            : RequestDefaults{};
  std::ifstream f(file, std::ios::binary);
  if (!f) fail(file, ": cannot open (check the permissions)", kFix);
  std::ostringstream text;
  text << f.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    fail(file, ": not valid JSON: ", e.what(), kFix);
  }
  if (!over.is_object()) return parse_generation_config(j, file, vocab_size);
  if (!j.is_object()) fail(file, ": expected a JSON object, found ", shown(j), kFix);
  j.update(over);
  return parse_generation_config(j, file + " with --override-generation-config", vocab_size);
}

std::string RequestDefaults::describe() const {
  if (source.empty()) return "built-in defaults (temperature 1, top_p 1, top_k off; no generation_config.json used)";
  std::vector<std::string> parts;
  if (temperature) parts.push_back("temperature " + num(*temperature));
  if (top_p) parts.push_back("top_p " + num(*top_p));
  if (top_k) parts.push_back("top_k " + (*top_k ? std::to_string(*top_k) : std::string("off")));
  if (max_tokens) parts.push_back("max_tokens " + std::to_string(*max_tokens));
  if (!eos_token_ids.empty()) parts.push_back("stop token ids " + json(eos_token_ids).dump());
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : ", ") + p;
  if (s.empty()) s = "nothing to take";
  s = "from " + source + ": " + s;
  if (!ignored.empty()) {
    s += "; ignored (not supported):";
    for (const std::string& i : ignored) s += " " + i;
  }
  return s + " (requests that set a field keep their value; --generation-config vllm ignores the file)";
}

}  // namespace blockspec
