#include "model/chat_files.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "model/weight_source.h"

namespace blockspec {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, ": cannot open (check the path and permissions)");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// tokenizer_config.json spells a special token as "text" or {"content": "text", ...}.
std::string token_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

void read_hf(const std::string& dir, ChatAssets& a) {
  const std::string cfg_path = dir + "/tokenizer_config.json";
  if (std::filesystem::exists(cfg_path)) {
    nlohmann::json c;
    try {
      c = nlohmann::json::parse(read_text(cfg_path));
    } catch (const nlohmann::json::parse_error& e) {
      fail(cfg_path, ": not valid JSON: ", e.what());
    }
    if (c.contains("bos_token")) a.bos_token = token_text(c["bos_token"]);
    if (c.contains("eos_token")) a.eos_token = token_text(c["eos_token"]);
    if (c.contains("add_bos_token") && c["add_bos_token"].is_boolean()) a.add_bos = c["add_bos_token"].get<bool>();
    if (c.contains("chat_template")) {
      const auto& t = c["chat_template"];
      if (t.is_string()) {
        a.template_source = t.get<std::string>();
      } else if (t.is_array()) {  // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        for (const auto& e : t)
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
            a.template_source = e["template"].get<std::string>();
      }
      if (!a.template_source.empty()) a.template_what = cfg_path + " chat_template";
    }
  }
  // Newer transformers save the template as its own file.
  const std::string jinja_path = dir + "/chat_template.jinja";
  if (a.template_source.empty() && std::filesystem::exists(jinja_path)) {
    a.template_source = read_text(jinja_path);
    a.template_what = jinja_path;
  }
}

void read_gguf(const std::string& path, ChatAssets& a) {
  GgufFile f(path);
  GgufTokenizerData d = gguf_tokenizer(f);
  auto text = [&](std::optional<int32_t> id) {
    return id && *id >= 0 && static_cast<size_t>(*id) < d.tokens.size() ? d.tokens[*id] : std::string();
  };
  a.bos_token = text(d.bos_token_id);
  a.eos_token = text(d.eos_token_id);
  a.add_bos = d.add_bos_token.value_or(false) && !a.bos_token.empty();
  if (!d.chat_template.empty()) {
    a.template_source = d.chat_template;
    a.template_what = path + " tokenizer.chat_template";
  }
}

}  // namespace

ChatAssets read_chat_assets(const std::string& model_path, const std::string& chat_template_file) {
  ChatAssets a;
  const std::string gguf = gguf_path_of(model_path);
  if (gguf.empty()) read_hf(model_path, a);
  else read_gguf(gguf, a);
  if (!chat_template_file.empty()) {
    a.template_source = read_text(chat_template_file);
    a.template_what = chat_template_file;
  }
  return a;
}

}  // namespace blockspec
