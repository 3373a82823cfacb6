// The golden tokenizer corpus, rebuilt from the repository's data/ and the committed
// synthetic documents by the rules of scripts/make_tokenizer_golden.py
// (see its docstring; the two must cut documents identically).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/mapped_file.h"

namespace blockspec::golden {

inline constexpr size_t kDocBytes = 16384;  // DOC_BYTES in the script

struct Document {
  std::string name;
  std::string text;
};

// The repository's data/ (copied there with its licences, data/README.md).
inline std::string shared_data_dir() { return std::string(BS_SOURCE_DIR) + "/data"; }

inline std::string fixture_dir() { return std::string(BS_SOURCE_DIR) + "/tests/fixtures/tokenizer"; }

// Shortest runs of chunks reaching kDocBytes; the remainder is the last.
inline void group_chunks(const std::vector<std::string>& chunks, const std::string& prefix,
                         std::vector<Document>* out) {
  std::string cur;
  bool open = false;
  int k = 0;
  for (const auto& c : chunks) {
    cur += c;
    open = true;
    if (cur.size() >= kDocBytes) {
      out->push_back({prefix + "/" + std::to_string(k++), cur});
      cur.clear();
      open = false;
    }
  }
  if (open) out->push_back({prefix + "/" + std::to_string(k), cur});
}

// String leaves in sorted-key order, depth first (nlohmann's object is a
// std::map, so iteration is already in byte order of the keys).
inline void string_leaves(const nlohmann::json& v, std::vector<std::string>* out) {
  if (v.is_string()) out->push_back(v.get<std::string>());
  else if (v.is_array() || v.is_object())
    for (const auto& x : v) string_leaves(x, out);
}

inline std::vector<Document> shared_documents() {
  std::vector<Document> docs;
  std::string dir = shared_data_dir();
  std::string text = read_text_file(dir + "/text/tinyshakespeare.txt");
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    size_t end = nl == std::string::npos ? text.size() : nl + 1;
    lines.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  group_chunks(lines, "shakespeare", &docs);
  for (const char* stem : {"mt_bench", "humaneval", "gsm8k_test", "gsm8k_train"}) {
    std::string path = dir + "/prompts/" + stem + ".jsonl";
    std::istringstream in(read_text_file(path));
    std::vector<std::string> records;
    std::string line;
    while (std::getline(in, line)) {
      if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
      std::vector<std::string> leaves;
      string_leaves(nlohmann::json::parse(line), &leaves);
      std::string rec;
      for (size_t i = 0; i < leaves.size(); ++i) rec += (i ? "\n\n" : "") + leaves[i];
      records.push_back(rec + "\n\n");
    }
    group_chunks(records, stem, &docs);
  }
  return docs;
}

inline std::vector<Document> synthetic_documents() {
  std::string path = fixture_dir() + "/synthetic_docs.json";
  auto j = nlohmann::json::parse(read_text_file(path));
  std::vector<Document> docs;
  for (const auto& d : j) docs.push_back({d.at("name").get<std::string>(), d.at("text").get<std::string>()});
  return docs;
}

inline uint64_t fnv1a64(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// The ids' bytes as int32 little-endian (this machine is little-endian;
// x86-64 is the only target).
inline uint64_t fnv1a64_ids(const std::vector<int32_t>& ids) {
  return fnv1a64(ids.data(), ids.size() * sizeof(int32_t));
}

}  // namespace blockspec::golden
