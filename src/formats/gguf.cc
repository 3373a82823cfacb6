// GGUF header parsing: a pure function over bytes, no I/O, so the fuzz target
// (fuzz/gguf_header_fuzz.cc) drives exactly this code. Checks follow
// ggml/src/gguf.cpp (gguf_init_from_file_impl) and are stricter where it lets
// a doubtful file through:
//   - duplicate tensor names and duplicate metadata keys are errors;
//   - every dimension must be >= 1 (gguf.cpp accepts 0) and n_dims 1..4;
//   - bool values must be 0 or 1;
//   - tensors must not overlap. Gaps between tensors are allowed (gguf.cpp
//     wants them packed in file order, which every known writer does), since a
//     gap cannot make us read a wrong byte.
#include "formats/gguf.h"

#include <algorithm>
#include <set>
#include <string_view>
#include <type_traits>

#include "base/error.h"

namespace blockspec {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
constexpr size_t kMaxKeyLen = 65535;     // gguf.md: keys are at most 2^16 - 1 bytes
// gguf.md caps tensor names at 64 bytes (GGML_MAX_NAME); we allow more but
// keep a bound so a name cannot be a megabyte of error message.
constexpr size_t kMaxTensorNameLen = 256;
// Arrays of arrays exist (nothing in practice nests deeper than 2); the bound
// keeps recursion on hostile input shallow.
constexpr int kMaxArrayDepth = 8;
// Nested-array values are ~200 bytes in memory for 12 bytes of file; bound
// their total so a lying file cannot turn into gigabytes of GgufValue.
constexpr uint64_t kMaxNestedValues = 1 << 20;
constexpr size_t kMaxQuoted = 120;

constexpr GgmlTypeTraits kGgmlTypes[] = {
    {GgmlType::kF32, "F32", 1, 4},          {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},      {GgmlType::kQ4_1, "Q4_1", 32, 20},
    {GgmlType::kQ5_0, "Q5_0", 32, 22},      {GgmlType::kQ5_1, "Q5_1", 32, 24},
    {GgmlType::kQ8_0, "Q8_0", 32, 34},      {GgmlType::kQ8_1, "Q8_1", 32, 40},
    {GgmlType::kQ2_K, "Q2_K", 256, 84},     {GgmlType::kQ3_K, "Q3_K", 256, 110},
    {GgmlType::kQ4_K, "Q4_K", 256, 144},    {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210},    {GgmlType::kQ8_K, "Q8_K", 256, 292},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66}, {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98}, {GgmlType::kIQ1_S, "IQ1_S", 256, 50},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18},  {GgmlType::kIQ3_S, "IQ3_S", 256, 110},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82},   {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::kI8, "I8", 1, 1},            {GgmlType::kI16, "I16", 1, 2},
    {GgmlType::kI32, "I32", 1, 4},          {GgmlType::kI64, "I64", 1, 8},
    {GgmlType::kF64, "F64", 1, 8},          {GgmlType::kIQ1_M, "IQ1_M", 256, 56},
    {GgmlType::kBF16, "BF16", 1, 2},        {GgmlType::kTQ1_0, "TQ1_0", 256, 54},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66},   {GgmlType::kMXFP4, "MXFP4", 32, 17},
    {GgmlType::kNVFP4, "NVFP4", 64, 36},    {GgmlType::kQ1_0, "Q1_0", 128, 18},
};

// JSON-style quoting, cut at kMaxQuoted, so every message stays one line.
std::string quote(std::string_view s) { return quote_for_message(s, kMaxQuoted); }

// Bytes of one element of a scalar type; 0 for string/array.
size_t scalar_width(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    default: return 0;
  }
}

std::string known_ggml_types() {
  std::string s;
  for (const auto& t : kGgmlTypes) s += str_cat(s.empty() ? "" : ", ", t.name, "=", static_cast<uint32_t>(t.type));
  return s;
}

// What is being read, for error messages: a string, or a callable that
// builds one only when an error is thrown (per-element contexts of 150k-token
// arrays would otherwise cost more than the parse).
template <class C>
std::string ctx_str(const C& c) {
  if constexpr (std::is_invocable_v<const C&>) {
    return c();
  } else {
    return std::string(c);
  }
}

// Bounds-checked little-endian cursor. `ctx` in each call says what is being
// read, so a truncation error names the key or tensor.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& what) : p_(data), size_(size), what_(what) {}
  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }

  template <class C>
  void need(uint64_t n, const C& ctx) const {
    if (n > left())
      fail(what_, ": ", ctx_str(ctx), ": file truncated at offset ", pos_, ": need ", n, " bytes, only ", left(),
           " left (file size ", size_, "); re-download the file");
  }
  template <class C>
  uint64_t uint(size_t width, const C& ctx) {
    need(width, ctx);
    uint64_t v = 0;
    for (size_t i = 0; i < width; ++i) v |= static_cast<uint64_t>(p_[pos_ + i]) << (8 * i);
    pos_ += width;
    return v;
  }
  template <class C>
  uint32_t u32(const C& ctx) { return static_cast<uint32_t>(uint(4, ctx)); }
  template <class C>
  uint64_t u64(const C& ctx) { return uint(8, ctx); }
  template <class C>
  std::string str(const C& ctx, size_t max_len) {
    uint64_t n = u64(ctx);
    if (n > max_len) fail(what_, ": ", ctx_str(ctx), ": string length ", n, " exceeds the limit of ", max_len, " bytes");
    if (n > left()) need(n, str_cat(ctx_str(ctx), " (string of ", n, " bytes)"));
    std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }
  template <class C>
  void bytes(uint8_t* out, size_t n, const C& ctx) {
    need(n, ctx);
    std::copy(p_ + pos_, p_ + pos_ + n, out);
    pos_ += n;
  }

 private:
  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& what_;
};

struct ParseState {
  Cursor cur;
  const std::string& what;
  uint64_t n_nested = 0;
};

GgufType value_type(ParseState& st, uint32_t raw, const std::string& ctx) {
  if (raw > static_cast<uint32_t>(GgufType::kF64))
    fail(st.what, ": ", ctx, ": unknown value type ", raw,
         " (expected 0..12: uint8, int8, uint16, int16, uint32, int32, float32, bool, string, array, uint64, "
         "int64, float64)");
  return static_cast<GgufType>(raw);
}

void read_value(ParseState& st, GgufValue& v, GgufType type, int depth, const std::string& ctx);

void read_array(ParseState& st, GgufValue& v, int depth, const std::string& ctx) {
  if (depth >= kMaxArrayDepth)
    fail(st.what, ": ", ctx, ": arrays nested deeper than ", kMaxArrayDepth, " levels");
  v.elem_type = value_type(st, st.cur.u32(ctx + " array element type"), ctx + " array element type");
  v.n_elems = st.cur.u64(ctx + " array count");
  // Smallest possible encoding of one element: bounds the count by the bytes
  // left before anything is allocated.
  size_t w = scalar_width(v.elem_type);
  uint64_t min_bytes = w ? w : v.elem_type == GgufType::kString ? 8 : 12;
  if (v.n_elems > st.cur.left() / min_bytes)
    fail(st.what, ": ", ctx, ": array of ", v.n_elems, " ", gguf_type_name(v.elem_type),
         " elements needs at least ", min_bytes, " bytes each, only ", st.cur.left(), " bytes left in the file");
  if (w) {
    v.raw.resize(v.n_elems * w);
    st.cur.bytes(v.raw.data(), v.raw.size(), ctx);
    if (v.elem_type == GgufType::kBool)
      for (uint64_t i = 0; i < v.n_elems; ++i)
        if (v.raw[i] > 1) fail(st.what, ": ", ctx, ": bool element ", i, " is ", int(v.raw[i]), ", expected 0 or 1");
  } else if (v.elem_type == GgufType::kString) {
    v.strs.reserve(v.n_elems);
    for (uint64_t i = 0; i < v.n_elems; ++i)
      v.strs.push_back(st.cur.str([&] { return str_cat(ctx, " element ", i); }, SIZE_MAX));
  } else {
    st.n_nested += v.n_elems;
    if (st.n_nested > kMaxNestedValues)
      fail(st.what, ": ", ctx, ": more than ", kMaxNestedValues, " nested array values in the file");
    v.items.resize(v.n_elems);
    for (uint64_t i = 0; i < v.n_elems; ++i)
      read_value(st, v.items[i], GgufType::kArray, depth + 1, str_cat(ctx, " element ", i));
  }
}

void read_value(ParseState& st, GgufValue& v, GgufType type, int depth, const std::string& ctx) {
  v.type = type;
  if (type == GgufType::kString) {
    v.str = st.cur.str(ctx, SIZE_MAX);
  } else if (type == GgufType::kArray) {
    read_array(st, v, depth, ctx);
  } else {
    v.bits = st.cur.uint(scalar_width(type), ctx);
    if (type == GgufType::kBool && v.bits > 1)
      fail(st.what, ": ", ctx, ": bool value is ", v.bits, ", expected 0 or 1");
  }
}

// Overflow-safe product of positive dims; fails past INT64_MAX.
int64_t checked_numel(const std::vector<int64_t>& ne, const std::string& what, const std::string& ctx) {
  int64_t n = 1;
  for (int64_t d : ne) {
    if (n > INT64_MAX / d) fail(what, ": ", ctx, ": element count overflows int64");
    n *= d;
  }
  return n;
}

GgufTensorInfo read_tensor_info(ParseState& st, uint64_t index, uint64_t alignment) {
  const std::string& what = st.what;
  GgufTensorInfo t;
  std::string ctx = str_cat("tensor #", index);
  t.name = st.cur.str(ctx + " name", kMaxTensorNameLen);
  if (t.name.empty()) fail(what, ": ", ctx, ": empty tensor name");
  ctx = "tensor " + quote(t.name);
  uint32_t n_dims = st.cur.u32(ctx + " n_dims");
  if (n_dims < 1 || n_dims > kMaxDims)
    fail(what, ": ", ctx, ": n_dims = ", n_dims, ", expected 1..", kMaxDims);
  for (uint32_t j = 0; j < n_dims; ++j) {
    uint64_t d = st.cur.u64(str_cat(ctx, " ne[", j, "]"));
    if (d == 0 || d > static_cast<uint64_t>(INT64_MAX))
      fail(what, ": ", ctx, ": ne[", j, "] = ", static_cast<int64_t>(d), ", expected a dimension >= 1");
    t.ne.push_back(static_cast<int64_t>(d));
  }
  uint32_t type_id = st.cur.u32(ctx + " type");
  const GgmlTypeTraits* tr = ggml_type_traits(type_id);
  if (!tr) fail(what, ": ", ctx, ": unknown ggml type ", type_id, " (known: ", known_ggml_types(), ")");
  t.type = tr->type;
  t.offset = st.cur.u64(ctx + " offset");
  int64_t numel = checked_numel(t.ne, what, ctx);
  if (t.ne[0] % tr->block_size != 0)
    fail(what, ": ", ctx, ": ne[0] = ", t.ne[0], " is not a multiple of the ", tr->name, " block size ",
         tr->block_size);
  int64_t n_blocks = numel / tr->block_size;
  if (n_blocks > INT64_MAX / tr->type_size) fail(what, ": ", ctx, ": byte size overflows int64");
  t.nbytes = static_cast<uint64_t>(n_blocks * tr->type_size);
  if (t.offset % alignment != 0)
    fail(what, ": ", ctx, ": data offset ", t.offset, " is not a multiple of general.alignment = ", alignment);
  return t;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static constexpr const char* kNames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32", "float32",
                                           "bool",  "string", "array",  "uint64", "int64",  "float64"};
  auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "unknown";
}

const GgmlTypeTraits* ggml_type_traits(uint32_t id) {
  for (const auto& t : kGgmlTypes)
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}

const GgmlTypeTraits& ggml_traits(GgmlType t) {
  const GgmlTypeTraits* tr = ggml_type_traits(static_cast<uint32_t>(t));
  BS_ASSERT(tr, "ggml type ", static_cast<uint32_t>(t));
  return *tr;
}

bool GgufValue::is_int() const { return scalar_width(type) && type != GgufType::kBool && !is_float(); }
bool GgufValue::is_float() const { return type == GgufType::kF32 || type == GgufType::kF64; }
std::string GgufValue::type_str() const {
  if (type != GgufType::kArray) return gguf_type_name(type);
  return str_cat("array[", gguf_type_name(elem_type), "]");
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

Shape GgufTensorInfo::shape() const { return Shape(ne.rbegin(), ne.rend()); }

GgufHeader parse_gguf_header(const uint8_t* data, size_t size, const std::string& what) {
  ParseState st{Cursor(data, size, what), what};
  Cursor& cur = st.cur;
  GgufHeader h;
  cur.need(4, "magic");
  uint32_t magic = cur.u32("magic");
  if (magic != kMagic)
    fail(what, ": not a GGUF file: magic is ", quote(std::string_view(reinterpret_cast<const char*>(data), 4)),
         ", expected \"GGUF\"");
  h.version = cur.u32("version");
  if (h.version == 0x02000000u || h.version == 0x03000000u)
    fail(what, ": big-endian GGUF (version field ", h.version, " byte-swapped) is not supported; use a little-endian file");
  if (h.version != 2 && h.version != 3)
    fail(what, ": GGUF version ", h.version, " is not supported, expected 3 (or 2, same layout)");
  uint64_t n_tensors = cur.u64("tensor count");
  uint64_t n_kv = cur.u64("metadata count");
  // A key-value pair takes >= 8 + 1 + 4 + 1 bytes, a tensor info >= 8 + 1 + 4 + 8 + 4 + 8.
  if (n_kv > cur.left() / 14)
    fail(what, ": header claims ", n_kv, " metadata pairs, more than the ", cur.left(), " bytes left can hold");
  if (n_tensors > cur.left() / 33)
    fail(what, ": header claims ", n_tensors, " tensors, more than the ", cur.left(), " bytes left can hold");

  std::set<std::string> keys;
  h.kv.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = cur.str(str_cat("metadata key #", i), kMaxKeyLen);
    std::string ctx = "metadata key " + quote(key);
    if (key.empty()) fail(what, ": metadata key #", i, ": empty key");
    if (!keys.insert(key).second) fail(what, ": ", ctx, ": duplicate key; keys must be unique");
    GgufValue v;
    GgufType type = value_type(st, cur.u32(ctx + " value type"), ctx);
    read_value(st, v, type, 0, ctx);
    h.kv.emplace_back(std::move(key), std::move(v));
  }

  for (const auto& [key, v] : h.kv) {
    if (key != "general.alignment") continue;
    if (!v.is_int() || v.type == GgufType::kI8 || v.type == GgufType::kI16 || v.type == GgufType::kI32 ||
        v.type == GgufType::kI64)
      fail(what, ": metadata key \"general.alignment\" has type ", v.type_str(), ", expected uint32");
    if (v.bits == 0 || (v.bits & (v.bits - 1)) != 0 || v.bits > (uint64_t{1} << 30))
      fail(what, ": metadata key \"general.alignment\" = ", v.bits, ", expected a power of two up to 2^30");
    h.alignment = v.bits;
  }

  std::set<std::string> names;
  h.tensors.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t = read_tensor_info(st, i, h.alignment);
    if (!names.insert(t.name).second) fail(what, ": tensor ", quote(t.name), ": duplicate tensor name");
    h.tensors.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment. With no
  // tensors a writer may stop right after the header, padding or not.
  uint64_t pos = cur.pos();
  h.data_offset = (pos + h.alignment - 1) / h.alignment * h.alignment;  // pos < 2^63, alignment <= 2^30
  if (h.tensors.empty()) return h;
  if (h.data_offset > size)
    fail(what, ": data section starts at offset ", h.data_offset, " but the file has only ", size,
         " bytes; the file is truncated");
  uint64_t data_size = size - h.data_offset;
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : h.tensors) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      fail(what, ": tensor ", quote(t.name), " (", ggml_type_name(t.type), ", ", t.nbytes, " bytes at data offset ",
           t.offset, ") ends past the end of the file: data section holds ", data_size,
           " bytes; the file is truncated or the header is corrupt");
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1];
    const GgufTensorInfo& b = *by_offset[i];
    if (b.offset < a.offset + a.nbytes)
      fail(what, ": tensor ", quote(b.name), " at data offset ", b.offset, " overlaps tensor ", quote(a.name),
           " at [", a.offset, ", ", a.offset + a.nbytes, ")");
  }
  return h;
}

}  // namespace blockspec
