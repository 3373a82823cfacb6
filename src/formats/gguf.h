// GGUF read (mmap, zero copy). Format: ggml-org/ggml docs/gguf.md and
// ggml/src/gguf.cpp. Layout, all little-endian:
//   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x  { string key | u32 value type | value }
//   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml type | u64 offset }
//   padding to general.alignment (default 32) | data section
// where string = u64 length + bytes (no NUL) and array = u32 element type +
// u64 count + elements (arrays may nest).
//
// Versions: 3 and 2 are accepted. v3 only added big-endian files, which are
// told apart by the byte order of the version field; v2 has the same layout as
// v3. v1 (32-bit counts) and big-endian files are rejected by name.
//
// Every failure throws Error naming the file and the key/tensor with the
// expected and found values. Counts are checked against the bytes that are
// left before anything is allocated, so a lying header cannot make the
// reader allocate more than a small multiple of the file's size.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "tensor/tensor.h"

namespace blockspec {

// ---- metadata values ----

enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* gguf_type_name(GgufType t);  // "uint32", "string", ...

// One metadata value. Scalars (ints, floats, bool) keep their raw
// little-endian bits in `bits`; arrays keep their element type and either the
// raw element bytes (numeric/bool elements), the strings, or nested values.
struct GgufValue {
  GgufType type = GgufType::kU8;
  uint64_t bits = 0;     // scalar payload, zero-extended
  std::string str;       // kString
  GgufType elem_type = GgufType::kU8;  // kArray
  uint64_t n_elems = 0;                // kArray
  std::vector<uint8_t> raw;            // kArray of numbers/bools: n_elems * width bytes
  std::vector<std::string> strs;       // kArray of strings
  std::vector<GgufValue> items;        // kArray of arrays

  bool is_int() const;    // any of the 8 integer types
  bool is_float() const;  // f32 or f64
  // Type as text for messages: "uint32", "array[string]", "array[array]".
  std::string type_str() const;
};

// ---- tensor types ----

// ggml_type numbers as in ggml.h / gguf-py constants.py (0.19.0). Numbers
// 4, 5 (removed Q4_2/Q4_3) and 31-33, 36-38 (removed repacked types) are not
// valid in files and are rejected like any other unknown number.
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15,
  kIQ2_XXS = 16, kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21,
  kIQ2_S = 22, kIQ4_XS = 23, kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28,
  kIQ1_M = 29, kBF16 = 30, kTQ1_0 = 34, kTQ2_0 = 35, kMXFP4 = 39, kNVFP4 = 40, kQ1_0 = 41,
};

struct GgmlTypeTraits {
  GgmlType type;
  const char* name;    // "Q4_K"
  int64_t block_size;  // elements per block
  int64_t type_size;   // bytes per block
};
// nullptr if `id` is not a known ggml type.
const GgmlTypeTraits* ggml_type_traits(uint32_t id);
const GgmlTypeTraits& ggml_traits(GgmlType t);
inline const char* ggml_type_name(GgmlType t) { return ggml_traits(t).name; }

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;  // GGUF order: ne[0] is the contiguous (innermost) dimension
  uint64_t offset = 0;      // relative to the data section; a multiple of the alignment
  uint64_t nbytes = 0;      // numel / block_size * type_size
  int64_t numel() const;
  // Row-major shape (ne reversed): a weight with ne = [K, N] is [N, K].
  Shape shape() const;
};

// ---- header ----

struct GgufHeader {
  uint32_t version = 0;
  uint64_t alignment = 32;   // general.alignment
  uint64_t data_offset = 0;  // file offset of the data section
  std::vector<std::pair<std::string, GgufValue>> kv;  // file order
  std::vector<GgufTensorInfo> tensors;                 // file order
};

// Parses and validates the whole header of a GGUF file held in [data, data +
// size): every tensor must lie inside the bytes given. `what` names the source
// in errors. Pure function over bytes: this is what the fuzz target drives.
GgufHeader parse_gguf_header(const uint8_t* data, size_t size, const std::string& what);

// ---- file ----

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);
  const std::string& path() const;
  const GgufHeader& header() const;
  const std::vector<GgufTensorInfo>& tensors() const { return header().tensors; }

  // Metadata. The getters throw `<file>: metadata key "k" missing` or
  // `<file>: metadata key "k" has type string, expected an integer`.
  bool has(const std::string& key) const;
  const GgufValue* find(const std::string& key) const;  // nullptr if absent
  const GgufValue& value(const std::string& key) const;
  int64_t get_int(const std::string& key) const;        // any integer type that fits int64
  double get_float(const std::string& key) const;       // f32 (widened) or f64
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  const std::vector<std::string>& get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;  // integer elements
  std::vector<double> get_float_array(const std::string& key) const; // f32/f64 elements
  std::optional<int64_t> find_int(const std::string& key) const;
  std::optional<double> find_float(const std::string& key) const;
  std::optional<std::string> find_string(const std::string& key) const;

  // Tensors.
  bool has_tensor(const std::string& name) const;
  const GgufTensorInfo& tensor_info(const std::string& name) const;  // throws naming tensor + file
  const uint8_t* tensor_data(const std::string& name) const;        // zero copy into the mapping
  const uint8_t* tensor_data(const GgufTensorInfo& t) const;
  // Drops the tensor's file pages from RSS once it has been converted.
  void release_tensor_pages(const GgufTensorInfo& t) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace blockspec
