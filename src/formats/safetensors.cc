// safetensors header and index parsing: pure functions over bytes, no I/O, so
// the fuzz target (fuzz/safetensors_header_fuzz.cc) drives exactly this code.
// Validation follows the Rust reference (Metadata::validate in
// safetensors/src/tensor.rs, 0.8.0) and is stricter where the reference lets
// an ambiguous file load silently:
//   - duplicate keys anywhere are rejected (serde keeps the last tensor entry);
//   - unknown fields in a tensor entry are rejected (serde ignores them), so a
//     field we do not understand can never be dropped without a word;
//   - the header must start with '{' (0.8.0 also accepts leading whitespace).
// Like the reference we accept `"__metadata__": null` and trailing JSON
// whitespace (spaces, tabs, newlines) after the object.
#include "formats/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>
#include <string_view>

#include "base/error.h"

namespace blockspec {
namespace {

using json = nlohmann::json;

// The reference reader's limit on N (MAX_HEADER_SIZE in tensor.rs).
constexpr uint64_t kMaxHeaderLen = 100'000'000;
// A valid header nests: top object > tensor entry / __metadata__ > shape or
// data_offsets array. Anything deeper is invalid; stopping there bounds the
// parser's work on hostile input.
constexpr size_t kMaxHeaderDepth = 3;
// Index files carry free-form "metadata"; allow some nesting, but not unbounded.
constexpr size_t kMaxIndexDepth = 32;
// Names and values quoted in error messages are cut here so that one hostile
// key cannot turn an error into megabytes of text.
constexpr size_t kMaxQuoted = 120;

std::string hex_byte(unsigned char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  return {kHex[c >> 4], kHex[c & 15]};
}

// JSON-style quoting for error messages: keeps each message on one line even
// when a tensor name holds control characters.
std::string quote(std::string_view s) { return quote_for_message(s, kMaxQuoted); }

// Short rendering of a JSON value for "found ..." in error messages.
std::string found(const json& v) {
  std::string d = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (d.size() > kMaxQuoted) d = d.substr(0, kMaxQuoted) + "...";
  return str_cat(v.type_name(), " ", d);
}

// Where in the document a key sits, for messages: `tensor "x"`, `__metadata__`.
using Describe = std::string (*)(const std::vector<std::string>& path);

std::string describe_header_path(const std::vector<std::string>& path) {
  if (path.empty()) return "header";
  if (path[0] == "__metadata__") return "__metadata__";
  std::string s = "tensor " + quote(path[0]);
  for (size_t i = 1; i < path.size(); ++i)
    if (!path[i].empty()) s += str_cat(" field ", quote(path[i]));  // "" = inside an array
  return s;
}

std::string describe_index_path(const std::vector<std::string>& path) {
  if (path.empty()) return "index";
  std::string s;
  for (size_t i = 0; i < path.size(); ++i) s += (i ? " > " : "") + quote(path[i]);
  return s;
}

// Parses JSON rejecting duplicate object keys (nlohmann keeps the last one
// silently) and nesting deeper than max_depth. Both are detected while
// parsing, through the parser callback, so no duplicate is ever lost.
json parse_json_strict(const char* first, const char* last, const std::string& what,
                       size_t max_depth, Describe describe) {
  struct Frame {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Frame> stack;
  std::vector<std::string> path;  // key of each open container below the top
  auto cb = [&](int, json::parse_event_t ev, json& v) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (stack.size() >= max_depth)
          fail(what, ": ", describe(path), ": JSON nested deeper than ", max_depth,
               " levels; this file format never nests that deep");
        if (!stack.empty()) path.push_back(stack.back().last_key);
        stack.emplace_back();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        stack.pop_back();
        if (!path.empty() && stack.size() == path.size()) path.pop_back();
        break;
      case json::parse_event_t::key: {
        const auto& k = v.get_ref<const std::string&>();
        if (!stack.back().keys.insert(k).second)
          fail(what, ": ", describe(path), ": duplicate key ", quote(k),
               "; keys must be unique (other readers silently keep only one of them)");
        stack.back().last_key = k;
        break;
      }
      case json::parse_event_t::value: break;
    }
    return true;
  };
  try {
    return json::parse(first, last, cb);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e999
    std::string msg = e.what();
    if (auto p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    // nlohmann quotes the offending token raw: it may be megabytes long or
    // hold the very bytes that are not UTF-8. Keep the message short, ASCII.
    std::string clean;
    for (size_t i = 0; i < msg.size() && i < 4 * kMaxQuoted; ++i) {
      unsigned char c = static_cast<unsigned char>(msg[i]);
      clean += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c)) : str_cat("\\x", hex_byte(c));
    }
    if (msg.size() > 4 * kMaxQuoted) clean += "...";
    fail(what, ": ", describe({}), " is not valid JSON: ", clean);
  }
}

uint64_t checked_mul(uint64_t a, uint64_t b, bool& overflow) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow = true;
  return r;
}

std::string known_dtypes() {
  std::string s;
  for (int i = 0; i < kNumDTypes; ++i) s += (i ? ", " : "") + std::string(dtype_name(static_cast<DType>(i)));
  return s;
}

// One non-negative integer inside an array field, e.g. shape[1].
uint64_t read_uint(const std::string& ctx, const char* field, size_t i, const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<uint64_t>();  // "-0"
  if (v.is_number_integer())
    fail(ctx, ": ", field, "[", i, "] is ", v.get<int64_t>(), "; expected a non-negative integer");
  fail(ctx, ": ", field, "[", i, "]: expected a non-negative integer, found ", found(v));
}

Shape parse_shape(const std::string& ctx, const json& v) {
  if (!v.is_array()) fail(ctx, ": field \"shape\": expected an array of integers, found ", found(v));
  Shape shape;
  shape.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint64_t d = read_uint(ctx, "shape", i, v[i]);
    if (d > static_cast<uint64_t>(INT64_MAX))
      fail(ctx, ": shape[", i, "] is ", d, "; expected at most ", INT64_MAX);
    shape.push_back(static_cast<int64_t>(d));
  }
  return shape;
}

SafetensorsEntry parse_entry(const std::string& what, const std::string& name, const json& v) {
  const std::string ctx = str_cat(what, ": tensor ", quote(name));
  if (!v.is_object())
    fail(ctx, ": expected an object {\"dtype\", \"shape\", \"data_offsets\"}, found ", found(v));
  for (const auto& [k, _] : v.items())
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      fail(ctx, ": unknown field ", quote(k), "; a tensor entry has exactly dtype, shape, data_offsets");
  for (const char* k : {"dtype", "shape", "data_offsets"})
    if (!v.contains(k)) fail(ctx, ": missing field \"", k, "\"");

  SafetensorsEntry e;
  e.name = name;
  const json& dt = v["dtype"];
  if (!dt.is_string()) fail(ctx, ": field \"dtype\": expected a string, found ", found(dt));
  auto parsed = dtype_from_name(dt.get_ref<const std::string&>());
  if (!parsed) fail(ctx, ": unknown dtype ", quote(dt.get_ref<const std::string&>()), "; expected one of ", known_dtypes());
  e.dtype = *parsed;
  e.shape = parse_shape(ctx, v["shape"]);

  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    fail(ctx, ": field \"data_offsets\": expected [BEGIN, END], found ", found(off));
  e.begin = read_uint(ctx, "data_offsets", 0, off[0]);
  e.end = read_uint(ctx, "data_offsets", 1, off[1]);
  if (e.end < e.begin) fail(ctx, ": data_offsets [", e.begin, ", ", e.end, "] end before they begin");

  // Sequential checked products, as the reference does (it also reports
  // overflow for [2^40, 2^40, 0]).
  bool overflow = false;
  uint64_t numel = 1;
  for (int64_t d : e.shape) numel = checked_mul(numel, static_cast<uint64_t>(d), overflow);
  uint64_t bits = checked_mul(numel, static_cast<uint64_t>(dtype_bits(e.dtype)), overflow);
  if (overflow)
    fail(ctx, ": shape ", shape_str(e.shape), " with dtype ", dtype_name(e.dtype), " overflows a 64-bit byte count");
  if (bits % 8 != 0)
    fail(ctx, ": shape ", shape_str(e.shape), " holds ", numel, " elements of ", dtype_name(e.dtype), " = ", bits,
         " bits, not a whole number of bytes");
  if (e.end - e.begin != bits / 8)
    fail(ctx, ": data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin, " bytes but dtype ",
         dtype_name(e.dtype), " shape ", shape_str(e.shape), " needs ", bits / 8);
  return e;
}

void parse_metadata(const std::string& what, const json& v, std::map<std::string, std::string>& out) {
  if (v.is_null()) return;  // the reference reads it as Option<...>
  if (!v.is_object()) fail(what, ": __metadata__: expected an object of strings, found ", found(v));
  for (const auto& [k, val] : v.items()) {
    if (!val.is_string())
      fail(what, ": __metadata__ key ", quote(k), ": expected a string value, found ", found(val),
           " (safetensors metadata maps strings to strings only)");
    out[k] = val.get<std::string>();
  }
}

// Entries sorted by offset must tile [0, total) exactly: no holes, no overlap.
uint64_t check_contiguous(const std::string& what, std::vector<SafetensorsEntry>& entries) {
  std::sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  uint64_t pos = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (e.begin == pos) {
      pos = e.end;
      continue;
    }
    std::string ctx = str_cat(what, ": tensor ", quote(e.name), ": data_offsets [", e.begin, ", ", e.end, "]");
    if (i == 0) fail(ctx, " start at ", e.begin, " but the first tensor must start at 0 (", e.begin, " unused bytes)");
    std::string prev = str_cat("tensor ", quote(entries[i - 1].name), " ends at ", pos);
    if (e.begin > pos) fail(ctx, " start at ", e.begin, " but ", prev, ": a hole of ", e.begin - pos, " bytes");
    fail(ctx, " start at ", e.begin, " but ", prev, ": they overlap by ", pos - e.begin, " bytes");
  }
  return pos;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& what) {
  if (size < 8) fail(what, ": file is ", size, " bytes; a safetensors file needs at least the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];  // little-endian u64
  if (n > kMaxHeaderLen) fail(what, ": header length N = ", n, " exceeds the limit of ", kMaxHeaderLen, " bytes");
  if (n > size - 8)
    fail(what, ": header length N = ", n, " but the file has only ", size - 8,
         " bytes after the 8-byte length (truncated or not a safetensors file)");
  const char* first = reinterpret_cast<const char*>(data + 8);
  if (n == 0 || first[0] != '{')
    fail(what, ": header must start with '{', found ",
         n == 0 ? std::string("an empty header") : str_cat("byte ", int(data[8]), " ", quote(std::string_view(first, 1))));

  // nlohmann stops at a NUL byte as if the input ended there, so "{}\0junk"
  // would parse; a raw NUL is never valid JSON, so reject it up front.
  if (const void* nul = std::memchr(first, 0, n))
    fail(what, ": header has a NUL byte at header offset ", static_cast<const char*>(nul) - first,
         "; JSON allows none (the header may only be padded with spaces)");
  json doc = parse_json_strict(first, first + n, what, kMaxHeaderDepth, describe_header_path);
  if (!doc.is_object()) fail(what, ": header: expected a JSON object, found ", found(doc));

  SafetensorsHeader h;
  h.header_len = n;
  h.entries.reserve(doc.size());
  for (const auto& [k, v] : doc.items()) {
    if (k == "__metadata__") {
      parse_metadata(what, v, h.metadata);
    } else {
      h.entries.push_back(parse_entry(what, k, v));
    }
  }
  uint64_t data_len = check_contiguous(what, h.entries);
  uint64_t expected = 8 + n + data_len;  // n <= 1e8 and data_len fits u64 after the checks above
  if (data_len > size || expected != size) {
    if (data_len > size || expected > size)
      fail(what, ": tensor data ends at byte ", data_len, " of the data buffer, so the file needs 8 + ", n, " + ",
           data_len, " bytes but has ", size, " (truncated)");
    fail(what, ": file has ", size - expected, " trailing bytes: 8 + ", n, " + ", data_len, " = ", expected,
         " bytes are described but the file has ", size);
  }
  return h;
}

SafetensorsIndex parse_safetensors_index(std::string_view text, const std::string& what) {
  json doc = parse_json_strict(text.data(), text.data() + text.size(), what, kMaxIndexDepth, describe_index_path);
  if (!doc.is_object()) fail(what, ": expected a JSON object with \"weight_map\", found ", found(doc));
  if (!doc.contains("weight_map")) fail(what, ": missing field \"weight_map\" (tensor name -> shard file)");
  const json& wm = doc["weight_map"];
  if (!wm.is_object()) fail(what, ": field \"weight_map\": expected an object, found ", found(wm));
  SafetensorsIndex idx;
  for (const auto& [name, shard] : wm.items()) {
    if (!shard.is_string())
      fail(what, ": weight_map entry for tensor ", quote(name), ": expected a shard file name, found ", found(shard));
    idx.weight_map[name] = shard.get<std::string>();
  }
  if (doc.contains("metadata")) {
    const json& md = doc["metadata"];
    if (!md.is_object() && !md.is_null()) fail(what, ": field \"metadata\": expected an object, found ", found(md));
    if (md.is_object() && md.contains("total_size")) {
      const json& ts = md["total_size"];
      if (!ts.is_number_unsigned())
        fail(what, ": metadata.total_size: expected a non-negative integer, found ", found(ts));
      idx.total_size = ts.get<uint64_t>();
    }
  }
  return idx;
}

}  // namespace blockspec
