#include "tokenizer/tokenizer_json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>

#include "base/error.h"

namespace blockspec::tok {

using nlohmann::json;

namespace {

// JSON value kinds spelled the way error messages show them.
std::string kind_of(const json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "the string \"" + j.get<std::string>() + "\"";
  if (j.is_array()) return "an array";
  return "an object";
}

struct Reader {
  const std::string& what;

  [[noreturn]] void bad(const std::string& path, const std::string& expected,
                        const json& found) const {
    fail(what, ": ", path, ": expected ", expected, ", found ", kind_of(found));
  }
  const json& member(const json& obj, const std::string& path, const char* key) const {
    if (!obj.is_object()) bad(path, "an object", obj);
    auto it = obj.find(key);
    if (it == obj.end()) fail(what, ": ", path, ".", key, ": missing (required field)");
    return *it;
  }
  std::string str(const json& obj, const std::string& path, const char* key) const {
    const json& v = member(obj, path, key);
    if (!v.is_string()) bad(path + "." + key, "a string", v);
    return v.get<std::string>();
  }
  bool flag(const json& obj, const std::string& path, const char* key, bool dflt) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) bad(path + "." + key, "a boolean", *it);
    return it->get<bool>();
  }
};

void parse_normalizer(const Reader& r, const json& j, const std::string& path,
                      std::vector<NormalForm>* out) {
  if (j.is_null()) return;
  std::string type = r.str(j, path, "type");
  if (type == "NFC") out->push_back(NormalForm::kNfc);
  else if (type == "NFD") out->push_back(NormalForm::kNfd);
  else if (type == "NFKC") out->push_back(NormalForm::kNfkc);
  else if (type == "NFKD") out->push_back(NormalForm::kNfkd);
  else if (type == "Sequence") {
    const json& list = r.member(j, path, "normalizers");
    if (!list.is_array()) r.bad(path + ".normalizers", "an array", list);
    for (size_t i = 0; i < list.size(); ++i)
      parse_normalizer(r, list[i], str_cat(path, ".normalizers[", i, "]"), out);
  } else {
    r.bad(path + ".type", "one of NFC, NFD, NFKC, NFKD, Sequence (or a null normalizer)", type);
  }
}

// A literal `String` split pattern, escaped for PCRE2.
std::string escape_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    bool plain = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 static_cast<unsigned char>(c) >= 0x80;
    if (!plain) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

SplitBehavior parse_behavior(const Reader& r, const json& j, const std::string& path) {
  std::string b = r.str(j, path, "behavior");
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  r.bad(path + ".behavior",
        "one of Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous", b);
}

void parse_pre_tokenizer(const Reader& r, const json& j, const std::string& path,
                         std::vector<PreTokenizerStep>* steps, bool* has_byte_level) {
  std::string type = r.str(j, path, "type");
  if (type == "Sequence") {
    const json& list = r.member(j, path, "pretokenizers");
    if (!list.is_array()) r.bad(path + ".pretokenizers", "an array", list);
    for (size_t i = 0; i < list.size(); ++i)
      parse_pre_tokenizer(r, list[i], str_cat(path, ".pretokenizers[", i, "]"), steps,
                          has_byte_level);
  } else if (type == "Split") {
    const json& pat = r.member(j, path, "pattern");
    std::string regex;
    if (pat.is_object() && pat.contains("Regex")) regex = r.str(pat, path + ".pattern", "Regex");
    else if (pat.is_object() && pat.contains("String"))
      regex = escape_literal(r.str(pat, path + ".pattern", "String"));
    else r.bad(path + ".pattern", "{\"Regex\": ...} or {\"String\": ...}", pat);
    PreTokenizerStep step;
    step.kind = PreTokenizerStep::Kind::kSplit;
    step.regex = std::make_shared<Regex>(regex, str_cat(r.what, ": ", path, ".pattern"));
    step.behavior = parse_behavior(r, j, path);
    step.invert = r.flag(j, path, "invert", false);
    steps->push_back(std::move(step));
  } else if (type == "ByteLevel") {
    PreTokenizerStep step;
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    // Defaults are HF's ByteLevel::default().
    step.add_prefix_space = r.flag(j, path, "add_prefix_space", true);
    if (r.flag(j, path, "use_regex", true))
      step.regex = std::make_shared<Regex>(kGpt2SplitPattern, path + " (GPT-2 regex)");
    steps->push_back(std::move(step));
    *has_byte_level = true;
  } else {
    r.bad(path + ".type", "one of Sequence, Split, ByteLevel", type);
  }
}

void parse_decoder(const Reader& r, const json& j, const std::string& path) {
  if (j.is_null()) r.bad(path, "a ByteLevel decoder", j);
  std::string type = r.str(j, path, "type");
  if (type == "Sequence") {
    const json& list = r.member(j, path, "decoders");
    if (!list.is_array() || list.empty()) r.bad(path + ".decoders", "a non-empty array", list);
    for (size_t i = 0; i < list.size(); ++i)
      parse_decoder(r, list[i], str_cat(path, ".decoders[", i, "]"));
  } else if (type != "ByteLevel") {
    r.bad(path + ".type", "ByteLevel (a byte-level BPE decoder)", type);
  }
}

std::vector<std::pair<std::string, std::string>> parse_merges(const Reader& r, const json& m,
                                                              const ByteLevelTable& table) {
  const json& merges = r.member(m, "model", "merges");
  if (!merges.is_array()) r.bad("model.merges", "an array", merges);
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  std::string a, b;
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    std::string path = str_cat("model.merges[", i, "]");
    std::string left, right;
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        r.bad(path, "\"left right\" (two tokens, one space)", e);
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      left = e[0].get<std::string>();
      right = e[1].get<std::string>();
    } else {
      r.bad(path, "a \"left right\" string or a [left, right] pair", e);
    }
    if (!byte_level_to_bytes(table, left, &a) || !byte_level_to_bytes(table, right, &b))
      r.bad(path, "tokens in the byte-level alphabet", e);
    out.emplace_back(a, b);
  }
  return out;
}

BpeModel parse_model(const Reader& r, const json& root, const ByteLevelTable& table,
                     std::vector<std::string>* model_strings) {
  const json& m = r.member(root, "", "model");
  if (!m.is_object()) r.bad("model", "an object", m);
  if (m.contains("type")) {
    std::string type = r.str(m, "model", "type");
    if (type != "BPE") r.bad("model.type", "BPE (byte-level BPE)", type);
  }
  if (auto it = m.find("dropout"); it != m.end() && !it->is_null() &&
                                   !(it->is_number() && it->get<double>() == 0.0))
    r.bad("model.dropout", "null (dropout would make encoding random)", *it);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = m.find(key);
    if (it != m.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      r.bad(str_cat("model.", key), "null or \"\" (not used by byte-level BPE)", *it);
  }
  const json& vocab = r.member(m, "model", "vocab");
  if (!vocab.is_object()) r.bad("model.vocab", "an object of token -> id", vocab);
  std::unordered_map<std::string, int32_t> bytes_to_id;
  bytes_to_id.reserve(vocab.size());
  std::string bytes;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX)
      r.bad("model.vocab[\"" + it.key() + "\"]", "a non-negative 32-bit id", *it);
    int32_t id = it->get<int32_t>();
    if (size_t(id) >= model_strings->size()) model_strings->resize(size_t(id) + 1);
    (*model_strings)[id] = it.key();
    // Tokens outside the byte-level alphabet can never come out of BPE over
    // bytes; they stay decodable through model_strings.
    if (byte_level_to_bytes(table, it.key(), &bytes)) bytes_to_id.emplace(bytes, id);
  }
  auto merges = parse_merges(r, m, table);
  return BpeModel(std::move(bytes_to_id), merges, r.flag(m, "model", "ignore_merges", false),
                  r.what);
}

std::vector<AddedToken> parse_added(const Reader& r, const json& root) {
  std::vector<AddedToken> out;
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return out;
  if (!it->is_array()) r.bad("added_tokens", "an array", *it);
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    std::string path = str_cat("added_tokens[", i, "]");
    AddedToken a;
    a.content = r.str(t, path, "content");
    const json& id = r.member(t, path, "id");
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      r.bad(path + ".id", "a non-negative 32-bit id", id);
    a.id = id.get<int32_t>();
    a.special = r.flag(t, path, "special", false);
    a.lstrip = r.flag(t, path, "lstrip", false);
    a.rstrip = r.flag(t, path, "rstrip", false);
    a.single_word = r.flag(t, path, "single_word", false);
    a.normalized = r.flag(t, path, "normalized", !a.special);
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

std::string apply_normalizers(const TokenizerParts& parts, std::string_view text) {
  if (parts.normalizers.empty()) return std::string(text);
  std::string s = normalize(text, parts.normalizers[0]);
  for (size_t i = 1; i < parts.normalizers.size(); ++i) s = normalize(s, parts.normalizers[i]);
  return s;
}

TokenizerParts parse_tokenizer_json(std::string_view json_text, const std::string& what) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) fail(what, ": not valid JSON (expected a HF tokenizer.json)");
  Reader r{what};
  if (!root.is_object()) r.bad("(root)", "an object", root);

  TokenizerParts p;
  p.byte_level = make_byte_level_table();
  if (auto it = root.find("normalizer"); it != root.end())
    parse_normalizer(r, *it, "normalizer", &p.normalizers);

  std::vector<PreTokenizerStep> steps;
  bool has_byte_level = false;
  auto pre = root.find("pre_tokenizer");
  if (pre == root.end() || pre->is_null())
    fail(what, ": pre_tokenizer: expected a ByteLevel pre-tokenizer, found none");
  parse_pre_tokenizer(r, *pre, "pre_tokenizer", &steps, &has_byte_level);
  if (!has_byte_level)
    fail(what, ": pre_tokenizer: expected a ByteLevel step (byte-level BPE), found none");
  p.pre_tokenizer = PreTokenizer(std::move(steps));
  auto dec = root.find("decoder");
  parse_decoder(r, dec == root.end() ? json() : *dec, "decoder");

  std::vector<std::string> model_strings;  // [max model id + 1], token text as in the JSON
  p.bpe = parse_model(r, root, p.byte_level, &model_strings);
  p.added = parse_added(r, root);

  size_t n_ids = model_strings.size();
  for (const auto& a : p.added) n_ids = std::max(n_ids, size_t(a.id) + 1);
  p.id_bytes.assign(n_ids, std::string());
  p.id_kind.assign(n_ids, TokenizerParts::IdKind::kAbsent);
  std::string bytes;
  // HF's ByteLevel decoder maps a token's characters back to bytes, or keeps
  // the token's own UTF-8 when a character is outside the alphabet; added
  // tokens go through the same decoder.
  auto decoded = [&](const std::string& s) {
    return byte_level_to_bytes(p.byte_level, s, &bytes) ? bytes : s;
  };
  for (size_t id = 0; id < model_strings.size(); ++id) {
    if (model_strings[id].empty()) continue;
    p.id_bytes[id] = decoded(model_strings[id]);
    p.id_kind[id] = TokenizerParts::IdKind::kModel;
  }
  std::vector<std::string> raw_patterns, norm_patterns;
  std::vector<AddedToken> raw_tokens, norm_tokens;
  for (const auto& a : p.added) {
    p.id_bytes[a.id] = decoded(a.content);
    p.id_kind[a.id] =
        a.special ? TokenizerParts::IdKind::kSpecial : TokenizerParts::IdKind::kAdded;
    if (first_invalid_utf8(a.content) != a.content.size())
      r.bad("added_tokens id " + std::to_string(a.id) + " content", "valid UTF-8", a.content);
    if (a.normalized) {
      norm_patterns.push_back(apply_normalizers(p, a.content));
      norm_tokens.push_back(a);
    } else {
      raw_patterns.push_back(a.content);
      raw_tokens.push_back(a);
    }
  }
  p.raw_matcher.build(raw_patterns, raw_tokens);
  p.normalized_matcher.build(norm_patterns, norm_tokens);
  return p;
}

}  // namespace blockspec::tok
