// safetensors read (mmap, single file or sharded through
// model.safetensors.index.json) and write. Validation follows
// ../shared/docs/quant_formats.md §1 (the Rust reference's Metadata::validate):
// every failure throws Error naming the file and tensor, expected vs found.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/mapped_file.h"
#include "tensor/tensor.h"

namespace blockspec {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;  // relative to the start of the data buffer
};

// Parsed and validated header. `file_size` is the whole file's size; `what`
// names the source in error messages. Pure function over bytes: this is what
// the fuzz target drives.
struct SafetensorsHeader {
  uint64_t header_len = 0;  // N
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsEntry> entries;  // sorted by begin offset
};
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& what);

// Parsed model.safetensors.index.json (as transformers writes it). Duplicate
// keys are rejected; `metadata.total_size` is read but not enforced, because
// writers disagree on it (shared and tied tensors); total_bytes() is exact.
struct SafetensorsIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file
  std::optional<uint64_t> total_size;
};
SafetensorsIndex parse_safetensors_index(std::string_view text, const std::string& what);

// One .safetensors file, memory mapped.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const;
  const std::map<std::string, std::string>& metadata() const;
  const std::vector<SafetensorsEntry>& entries() const;
  bool has(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;  // throws if missing
  // Zero-copy view; keeps the mapping alive. The data is naturally aligned
  // when the file comes from a canonical writer (ours, save_file: 8 + N is a
  // multiple of 8 and tensors are sorted by alignment); the format does not
  // require it, so check the pointer before aligned SIMD loads.
  Tensor tensor(const std::string& name) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// A checkpoint: `path` is a directory (model.safetensors or
// model.safetensors.index.json + shards inside), a .safetensors file, or an
// index .json file. Every shard is validated on open; weight_map entries that
// point to a missing shard or a tensor absent from its shard are errors, and
// so is a tensor stored in two shards. A tensor present in a shard but absent
// from weight_map is served from that shard (transformers loads it too). A
// directory holding both model.safetensors and an index reads the single file
// (transformers' order). Details: safetensors_file.cc.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& path);
  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;  // throws naming tensor + path
  Tensor tensor(const std::string& name) const;                  // throws naming tensor + path
  const std::string& file_of(const std::string& name) const;
  uint64_t total_bytes() const;

 private:
  std::string path_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> index_;  // tensor name -> files_ index
};

// Writes tensors in the reference writer's canonical layout (sorted by dtype
// alignment descending, then name; no gaps; header padded with spaces to a
// multiple of 8), so the output is byte-identical to safetensors' save_file
// for the same tensors and metadata.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace blockspec
