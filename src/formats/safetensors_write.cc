// safetensors writer, byte-identical to the reference save_file (Rust
// `prepare()` + serde_json compact output, safetensors 0.8.0) for the same
// tensors and metadata. Proven by tests/formats/safetensors_golden_test.cc
// against files written by the reference.
//
// Two cases where the bytes cannot match by construction, both harmless to
// every reader (readers must not rely on key order):
//   - the reference keeps metadata in a Rust HashMap, so with two or more
//     metadata keys its key order changes from run to run; we write them
//     sorted by key (std::map order);
//   - save_file(metadata={}) writes `"__metadata__":{}`, save_file() omits it;
//     an empty map here omits it.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <set>
#include <string_view>

#include "base/error.h"
#include "formats/safetensors.h"

namespace blockspec {
namespace {

// serde_json's string escaping: \" \\ \b \f \n \r \t, other bytes < 0x20 as
// \u00xx with lowercase hex; everything else (DEL, '/', non-ASCII) verbatim.
void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// The header is JSON, so every name must be valid UTF-8; the reference cannot
// even express anything else (its names are Python str / Rust String).
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

void check_inputs(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                  const std::map<std::string, std::string>& metadata) {
  std::set<std::string_view> seen;
  for (const auto& [name, t] : tensors) {
    if (!valid_utf8(name)) fail(path, ": tensor name is not valid UTF-8 (safetensors headers are JSON)");
    if (name == "__metadata__") fail(path, ": \"__metadata__\" is reserved and cannot name a tensor");
    if (!seen.insert(name).second) fail(path, ": tensor \"", name, "\" is given twice");
    for (int64_t d : t.shape())
      if (d < 0) fail(path, ": tensor \"", name, "\": negative dimension in shape ", shape_str(t.shape()));
    int64_t numel = t.numel();
    if ((numel * dtype_bits(t.dtype())) % 8 != 0)
      fail(path, ": tensor \"", name, "\": ", numel, " elements of ", dtype_name(t.dtype()),
           " are not a whole number of bytes; pad the last dimension");
    if (t.nbytes() > 0 && t.data() == nullptr) fail(path, ": tensor \"", name, "\" has no data");
  }
  for (const auto& [k, v] : metadata)
    if (!valid_utf8(k) || !valid_utf8(v)) fail(path, ": metadata key \"", k, "\" or its value is not valid UTF-8");
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  check_inputs(path, tensors, metadata);

  // Largest dtype (enum order = alignment order) first, then name, so that
  // every tensor lands naturally aligned once 8 + N is a multiple of 8.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    DType da = tensors[a].second.dtype(), db = tensors[b].second.dtype();
    if (da != db) return da > db;
    return tensors[a].first < tensors[b].first;  // byte order, like Rust's String
  });

  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ',';
      first = false;
      append_json_string(header, k);
      header += ':';
      append_json_string(header, v);
    }
    header += '}';
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const auto& [name, t] = tensors[i];
    if (header.size() > 1) header += ',';
    append_json_string(header, name);
    header += str_cat(":{\"dtype\":\"", dtype_name(t.dtype()), "\",\"shape\":[");
    for (size_t d = 0; d < t.shape().size(); ++d) header += str_cat(d ? "," : "", t.shape()[d]);
    header += str_cat("],\"data_offsets\":[", offset, ",", offset + t.nbytes(), "]}");
    offset += t.nbytes();
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');

  // Write to a side file and rename, so a failed write never leaves a
  // truncated checkpoint under the final name.
  const std::string tmp = path + ".partial";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) fail(path, ": cannot open ", tmp, " for writing");
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (size_t i : order) {
    const Tensor& t = tensors[i].second;
    if (ok && t.nbytes() > 0) ok = std::fwrite(t.data(), 1, t.nbytes(), f) == t.nbytes();
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail(path, ": write failed (disk full or not writable?)");
  }
}

}  // namespace blockspec
