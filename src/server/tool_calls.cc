#include "server/tool_calls.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

#include "server/python_json.h"

namespace blockspec {

using ojson = nlohmann::ordered_json;

namespace {

constexpr std::string_view kCallOpen = "<tool_call>", kCallClose = "</tool_call>";
constexpr std::string_view kFnOpen = "<function=", kFnClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=", kParamClose = "</parameter>";

struct Hit {
  size_t at = std::string::npos;
  std::string_view tag;
};

// The earliest of `tags` in s at or after `from`.
template <size_t N>
Hit first_of(const std::string& s, size_t from, const std::array<std::string_view, N>& tags) {
  Hit h;
  for (std::string_view t : tags) {
    const size_t p = s.find(t, from);
    if (p < h.at) h = {p, t};
  }
  return h;
}

// The end of what is certain in s[from, ...): s minus its longest suffix
// that is a proper prefix of one of `tags` (that suffix may still become one).
template <size_t N>
size_t certain_end(const std::string& s, size_t from, const std::array<std::string_view, N>& tags) {
  size_t hold = 0;
  for (std::string_view t : tags)
    for (size_t k = std::min(t.size() - 1, s.size() - from); k > hold; --k)
      if (std::string_view(s).substr(s.size() - k) == t.substr(0, k)) {
        hold = k;
        break;
      }
  return s.size() - hold;
}

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; });
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A JSON string's inside, as py_dumps writes it (no quotes).
std::string escaped(const std::string& s) {
  const std::string q = py_dumps(ojson(s));
  return q.substr(1, q.size() - 2);
}

bool string_type(const std::string& t) {
  return t == "string" || t == "str" || t == "text" || t == "varchar" || t == "char" || t == "enum";
}

// The declared type of a parameter: its schema's "type" (stripped, lower
// case), "string" when the schema has none, "" when the value is not a
// string (Python's str() of it matches no rule below).
std::string declared_type(const ojson* schema) {
  if (!schema || !schema->is_object() || !schema->contains("type")) return "string";
  const ojson& t = (*schema)["type"];
  if (!t.is_string()) return "";
  std::string s = t.get<std::string>();
  const size_t b = s.find_first_not_of(" \t\n\r\f\v"), e = s.find_last_not_of(" \t\n\r\f\v");
  return b == std::string::npos ? "" : lower(s.substr(b, e - b + 1));
}

bool starts(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// vLLM's Qwen3 value conversion (_convert_param_value); `known`: the tool's
// schema lists the parameter.
ojson convert_value(const std::string& v, bool known, const ojson* schema) {
  if (lower(v) == "null") return nullptr;
  if (!known) return v;
  const std::string t = declared_type(schema);
  if (string_type(t)) return v;
  if (starts(t, "int") || starts(t, "uint") || starts(t, "long") || starts(t, "short") || starts(t, "unsigned")) {
    if (auto i = py_int(v)) return *py_literal_eval(*i);
    return v;
  }
  if (starts(t, "num") || starts(t, "float")) {
    auto f = py_float(v);
    if (!f || !std::isfinite(*f)) return v;  // int(inf) / int(nan) raise: the string stays
    if (*f != std::trunc(*f)) return *f;
    char digits[400];
    std::snprintf(digits, sizeof digits, "%.0f", *f);  // int(f): exact for every integral double
    return *py_literal_eval(digits);
  }
  if (t == "boolean" || t == "bool" || t == "binary") return lower(v) == "true";
  if (t == "object" || t == "array" || t == "arr" || starts(t, "dict") || starts(t, "list"))
    if (auto j = py_json_loads(v)) return *j;
  if (auto l = py_literal_eval(v)) return *l;
  return v;
}

}  // namespace

std::optional<ToolCallFormat> tool_call_format(const std::string& name) {
  if (name == "hermes") return ToolCallFormat::hermes;
  if (name == "qwen3_coder") return ToolCallFormat::qwen3_coder;
  if (name == "qwen3_xml") return ToolCallFormat::qwen3_xml;
  return std::nullopt;
}

ToolCallStream::ToolCallStream(ToolCallFormat format, ojson tools, IdFn new_id)
    : format_(format), tools_(std::move(tools)), new_id_(std::move(new_id)) {}

void ToolCallStream::feed(const std::string& piece, std::vector<ToolCallDelta>& out) {
  buf_ += piece;
  run(false, out);
}

void ToolCallStream::finish(std::vector<ToolCallDelta>& out) { run(true, out); }

void ToolCallStream::run(bool final, std::vector<ToolCallDelta>& out) {
  while (true) {
    bool progressed;
    if (!in_calls_) progressed = step_content(final, out);
    else if (format_ == ToolCallFormat::hermes) progressed = step_hermes(final, out);
    else progressed = step_qwen3(final, out);
    if (!progressed) return;
  }
}

void ToolCallStream::emit_content(const std::string& text, std::vector<ToolCallDelta>& out) {
  if (text.empty()) return;
  ToolCallDelta d;
  d.content = text;
  out.push_back(std::move(d));
}

// Text between calls: content unless blank (the Qwen3 formats' tags dropped).
void ToolCallStream::emit_outside(std::string text, std::vector<ToolCallDelta>& out) {
  if (format_ != ToolCallFormat::hermes)
    for (std::string_view tag : {kCallOpen, kCallClose})
      for (size_t p; (p = text.find(tag)) != std::string::npos;) text.erase(p, tag.size());
  if (!blank(text)) emit_content(text, out);
}

void ToolCallStream::open_call(const std::string& name, std::vector<ToolCallDelta>& out) {
  ToolCallDelta d;
  d.index = n_calls_++;
  d.id = new_id_();
  d.name = name;
  out.push_back(std::move(d));
}

void ToolCallStream::emit_args(const std::string& piece, std::vector<ToolCallDelta>& out) {
  if (piece.empty()) return;
  ToolCallDelta d;
  d.index = n_calls_ - 1;
  d.arguments = piece;
  out.push_back(std::move(d));
}

// Before the first call: content up to the first tag.
bool ToolCallStream::step_content(bool final, std::vector<ToolCallDelta>& out) {
  const std::array<std::string_view, 2> tags = {kCallOpen, format_ == ToolCallFormat::hermes ? kCallOpen : kFnOpen};
  const Hit h = first_of(buf_, pos_, tags);
  if (h.at != std::string::npos) {
    emit_content(buf_.substr(pos_, h.at - pos_), out);
    pos_ = h.at;
    in_calls_ = true;
    return true;
  }
  const size_t end = final ? buf_.size() : certain_end(buf_, pos_, tags);
  emit_content(buf_.substr(pos_, end - pos_), out);
  pos_ = end;
  return false;
}

// hermes: each <tool_call> ... </tool_call> (or to the end) is one JSON object.
bool ToolCallStream::step_hermes(bool final, std::vector<ToolCallDelta>& out) {
  const size_t open = buf_.find(kCallOpen, pos_);
  if (open == std::string::npos) {
    if (!final) return false;  // text after the calls: content at the end, unless blank
    emit_outside(buf_.substr(pos_), out);
    pos_ = buf_.size();
    return false;
  }
  if (open > pos_) {
    emit_outside(buf_.substr(pos_, open - pos_), out);
    pos_ = open;
  }
  const size_t body = open + kCallOpen.size();
  size_t close = buf_.find(kCallClose, body);
  if (close == std::string::npos && !final) return false;
  const size_t end = close == std::string::npos ? buf_.size() : close + kCallClose.size();
  if (close == std::string::npos) close = buf_.size();
  const std::optional<ojson> call = py_json_loads(buf_.substr(body, close - body));
  const bool ok = call && call->is_object() && call->contains("name") && (*call)["name"].is_string() &&
                  call->contains("arguments");
  if (ok) {
    open_call((*call)["name"].get<std::string>(), out);
    emit_args(py_dumps((*call)["arguments"]), out);
  } else {
    emit_content(buf_.substr(open, end - open), out);  // malformed: returned as written
  }
  pos_ = end;
  return pos_ < buf_.size();
}

const ojson* ToolCallStream::param_schema(const std::string& param) const {
  // vLLM's _get_arguments_config: the function's parameters.properties, or
  // the parameters object itself when it has no "properties".
  if (!tools_.is_array()) return nullptr;
  for (const ojson& t : tools_) {
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function")) continue;
    const ojson& f = t["function"];
    if (!f.is_object() || !f.contains("name") || f["name"] != fn_name_) continue;
    if (!f.contains("parameters") || !f["parameters"].is_object()) return nullptr;
    const ojson& p = f["parameters"];
    const ojson& props = p.contains("properties") ? p["properties"] : p;
    if (!props.is_object() || !props.contains(param)) return nullptr;
    return &props[param];
  }
  return nullptr;
}

// Qwen3 formats: functions, each with parameters.
bool ToolCallStream::step_qwen3(bool final, std::vector<ToolCallDelta>& out) {
  if (in_param_) return step_param(final, out);
  if (!fn_open_) {
    const size_t fn = buf_.find(kFnOpen, pos_);
    if (fn == std::string::npos) {
      if (!final) return false;
      emit_outside(buf_.substr(pos_), out);
      pos_ = buf_.size();
      return false;
    }
    if (fn > pos_) {
      emit_outside(buf_.substr(pos_, fn - pos_), out);
      pos_ = fn;
    }
    const size_t gt = buf_.find('>', fn + kFnOpen.size());
    if (gt == std::string::npos) {
      if (final) {  // no name: the text is returned as written
        emit_content(buf_.substr(fn), out);
        pos_ = buf_.size();
      }
      return false;
    }
    fn_name_ = buf_.substr(fn + kFnOpen.size(), gt - fn - kFnOpen.size());
    open_call(fn_name_, out);
    emit_args("{", out);
    fn_open_ = true;
    n_params_ = 0;
    pos_ = gt + 1;
    return true;
  }
  // In a function: the next parameter, or its end (</function>, or the end
  // of the call block or the next function when </function> is missing).
  const std::array<std::string_view, 4> tags = {kParamOpen, kFnClose, kCallClose, kFnOpen};
  const Hit h = first_of(buf_, pos_, tags);
  if (h.at == std::string::npos && !final) return false;
  if (h.tag == kParamOpen) {
    const size_t gt = buf_.find('>', h.at + kParamOpen.size());
    if (gt != std::string::npos) {
      param_name_ = buf_.substr(h.at + kParamOpen.size(), gt - h.at - kParamOpen.size());
      in_param_ = true;
      str_started_ = false;
      str_sent_ = 0;
      value_start_ = gt + 1;
      pos_ = gt + 1;
      return true;
    }
    if (!final) return false;  // a parameter name still arriving; at the end it is dropped
  }
  emit_args("}", out);
  fn_open_ = false;
  pos_ = h.at == std::string::npos ? buf_.size() : h.tag == kFnClose ? h.at + kFnClose.size() : h.at;
  if (h.tag == kParamOpen) pos_ = buf_.size();
  return pos_ < buf_.size() || final;
}

bool ToolCallStream::step_param(bool final, std::vector<ToolCallDelta>& out) {
  const std::array<std::string_view, 5> tags = {kParamClose, kParamOpen, kFnClose, kCallClose, kFnOpen};
  const Hit h = first_of(buf_, value_start_, tags);
  if (h.at == std::string::npos && !final) {
    if (format_ == ToolCallFormat::qwen3_xml) stream_string_param(certain_end(buf_, value_start_, tags), out);
    return false;
  }
  const size_t end = h.at == std::string::npos ? buf_.size() : h.at;
  finish_param(buf_.substr(value_start_, end - value_start_), out);
  in_param_ = false;
  pos_ = h.tag == kParamClose ? end + kParamClose.size() : end;
  return true;
}

void ToolCallStream::finish_param(const std::string& raw, std::vector<ToolCallDelta>& out) {
  std::string v = raw;
  if (!v.empty() && v.front() == '\n') v.erase(0, 1);
  if (!v.empty() && v.back() == '\n') v.pop_back();
  if (str_started_) {  // qwen3_xml streamed this string: the rest and the closing quote
    emit_args(escaped(v.substr(str_sent_)) + "\"", out);
  } else {
    const ojson* schema = param_schema(param_name_);
    const ojson value = convert_value(v, schema != nullptr, schema);
    emit_args((n_params_ ? ", " : "") + py_dumps(ojson(param_name_)) + ": " + py_dumps(value), out);
  }
  ++n_params_;
}

// qwen3_xml: a string value streams as it arrives. Held back: one trailing
// newline (dropped if the value ends there) and a value that may still turn
// out to be "null" (which is JSON null, not a string).
void ToolCallStream::stream_string_param(size_t end, std::vector<ToolCallDelta>& out) {
  const ojson* schema = param_schema(param_name_);
  if (schema && !string_type(declared_type(schema))) return;
  std::string v = buf_.substr(value_start_, end - value_start_);
  if (v.empty()) return;  // a leading newline may still come
  if (v.front() == '\n') v.erase(0, 1);
  if (!v.empty() && v.back() == '\n') v.pop_back();
  if (!str_started_) {
    if (std::string_view("null").substr(0, std::min<size_t>(v.size(), 4)) == lower(v)) return;
    emit_args((n_params_ ? ", " : "") + py_dumps(ojson(param_name_)) + ": \"", out);
    str_started_ = true;
  }
  emit_args(escaped(v.substr(str_sent_)), out);
  str_sent_ = v.size();
}

ToolCallSplit extract_tool_calls(ToolCallFormat format, const std::string& text, const ojson& tools,
                                 const ToolCallStream::IdFn& new_id) {
  ToolCallStream s(format, tools, new_id);
  std::vector<ToolCallDelta> pieces;
  s.feed(text, pieces);
  s.finish(pieces);
  ToolCallSplit out;
  for (const ToolCallDelta& d : pieces) {
    if (d.index < 0) {
      out.content = out.content.value_or("") + d.content;
    } else if (d.index == static_cast<int>(out.calls.size())) {
      out.calls.push_back({d.id, d.name, d.arguments});
    } else {
      out.calls[d.index].arguments += d.arguments;
    }
  }
  return out;
}

}  // namespace blockspec
