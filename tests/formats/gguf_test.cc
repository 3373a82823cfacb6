// parse_gguf_header over hand-made bytes: every way a header can be wrong
// must throw Error naming the file and the key/tensor, and the valid corner
// cases (v2, empty arrays, no tensors) must load.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "formats/gguf.h"

namespace blockspec {
namespace {

constexpr const char* kWhat = "bad.gguf";

// Little-endian byte writer for GGUF headers.
struct Bytes {
  std::vector<uint8_t> b;
  Bytes& u8(uint8_t v) { b.push_back(v); return *this; }
  Bytes& u32(uint32_t v) { for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i))); return *this; }
  Bytes& u64(uint64_t v) { for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i))); return *this; }
  Bytes& str(const std::string& s) { u64(s.size()); b.insert(b.end(), s.begin(), s.end()); return *this; }
  Bytes& raw(const std::vector<uint8_t>& v) { b.insert(b.end(), v.begin(), v.end()); return *this; }
};

struct Kv {
  std::string key;
  uint32_t type;
  std::vector<uint8_t> value;  // encoded value without the type field
};
Kv kv_u32(const std::string& k, uint32_t v) { return {k, 4, Bytes().u32(v).b}; }
Kv kv_str(const std::string& k, const std::string& v) { return {k, 8, Bytes().str(v).b}; }

struct Ti {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type;
  uint64_t offset;
};

struct Spec {
  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  std::vector<Kv> kv = {kv_str("general.architecture", "llama")};
  // a: F32 [8] = 32 bytes at 0; b: Q8_0 ne [32, 2] = 2 blocks = 68 bytes at 32.
  std::vector<Ti> tensors = {{"a", {8}, 0, 0}, {"b", {32, 2}, 8, 32}};
  uint64_t alignment = 32;
  size_t data_bytes = 100;
  int64_t n_kv_override = -1, n_tensors_override = -1;
};

std::vector<uint8_t> build(const Spec& s) {
  Bytes o;
  o.u32(s.magic).u32(s.version);
  o.u64(s.n_tensors_override >= 0 ? static_cast<uint64_t>(s.n_tensors_override) : s.tensors.size());
  o.u64(s.n_kv_override >= 0 ? static_cast<uint64_t>(s.n_kv_override) : s.kv.size());
  for (const auto& kv : s.kv) o.str(kv.key).u32(kv.type).raw(kv.value);
  for (const auto& t : s.tensors) {
    o.str(t.name).u32(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) o.u64(d);
    o.u32(t.type).u64(t.offset);
  }
  while (o.b.size() % s.alignment) o.u8(0);
  for (size_t i = 0; i < s.data_bytes; ++i) o.u8(static_cast<uint8_t>(i));
  return o.b;
}

GgufHeader parse(const std::vector<uint8_t>& b) { return parse_gguf_header(b.data(), b.size(), kWhat); }

struct BadCase {
  const char* label;
  std::vector<uint8_t> bytes;
  std::vector<std::string> needles;  // all must appear in the message
};

Spec with(std::function<void(Spec&)> f) {
  Spec s;
  f(s);
  return s;
}

std::vector<BadCase> bad_cases() {
  // array header: element type, count; then elements
  auto arr = [](uint32_t elem, uint64_t n, std::vector<uint8_t> elems = {}) {
    return Bytes().u32(elem).u64(n).raw(elems).b;
  };
  std::vector<uint8_t> deep = arr(8, 1, Bytes().u64(1).u8('x').b);  // array[string] of 1
  for (int i = 0; i < 9; ++i) deep = arr(9, 1, deep);                 // wrapped 9 times
  return {
      {"empty", {}, {"magic", "truncated", "need 4 bytes"}},
      {"bad_magic", build(with([](Spec& s) { s.magic = 0x47554747; })), {"not a GGUF file", "\"GGUG\""}},
      {"version_1", build(with([](Spec& s) { s.version = 1; })), {"GGUF version 1", "expected 3"}},
      {"version_4", build(with([](Spec& s) { s.version = 4; })), {"GGUF version 4"}},
      {"big_endian", build(with([](Spec& s) { s.version = 0x03000000; })), {"big-endian"}},
      {"huge_n_kv", build(with([](Spec& s) { s.n_kv_override = int64_t{1} << 60; })),
       {"1152921504606846976 metadata pairs"}},
      {"huge_n_tensors", build(with([](Spec& s) { s.n_tensors_override = int64_t{1} << 60; })),
       {"1152921504606846976 tensors"}},
      {"key_string_past_eof", Bytes().u32(0x46554747).u32(3).u64(0).u64(1).u64(1000).raw(std::vector<uint8_t>(20)).b,
       {"metadata key #0 (string of 1000 bytes)", "truncated at offset 32", "only 20 left"}},
      {"value_string_past_eof",
       build(with([](Spec& s) { s.kv = {{"general.name", 8, Bytes().u64(1000).b}}; s.tensors = {}; s.data_bytes = 0; })),
       {"metadata key \"general.name\"", "string of 1000 bytes", "truncated"}},
      {"huge_array_count", build(with([&](Spec& s) { s.kv.push_back({"tokenizer.ggml.tokens", 9, arr(8, uint64_t{1} << 60)}); })),
       {"metadata key \"tokenizer.ggml.tokens\"", "array of 1152921504606846976 string elements"}},
      {"huge_u32_array", build(with([&](Spec& s) { s.kv.push_back({"x.ids", 9, arr(4, 1000000)}); })),
       {"metadata key \"x.ids\"", "array of 1000000 uint32"}},
      {"unknown_value_type", build(with([](Spec& s) { s.kv.push_back({"x.weird", 13, {}}); })),
       {"metadata key \"x.weird\"", "unknown value type 13"}},
      {"unknown_array_elem_type", build(with([&](Spec& s) { s.kv.push_back({"x.arr", 9, arr(77, 1)}); })),
       {"metadata key \"x.arr\"", "unknown value type 77"}},
      {"arrays_too_deep", build(with([&](Spec& s) { s.kv.push_back({"x.deep", 9, deep}); })),
       {"metadata key \"x.deep\"", "nested deeper than 8"}},
      {"bad_bool", build(with([](Spec& s) { s.kv.push_back({"x.flag", 7, {2}}); })),
       {"metadata key \"x.flag\"", "bool value is 2"}},
      {"duplicate_key", build(with([](Spec& s) { s.kv.push_back(kv_str("general.architecture", "qwen2")); })),
       {"metadata key \"general.architecture\"", "duplicate key"}},
      {"empty_key", build(with([](Spec& s) { s.kv.push_back(kv_str("", "v")); })), {"metadata key #1", "empty key"}},
      {"alignment_not_pow2", build(with([](Spec& s) { s.kv.push_back(kv_u32("general.alignment", 48)); })),
       {"\"general.alignment\" = 48", "power of two"}},
      {"alignment_zero", build(with([](Spec& s) { s.kv.push_back(kv_u32("general.alignment", 0)); })),
       {"\"general.alignment\" = 0"}},
      {"alignment_string", build(with([](Spec& s) { s.kv.push_back(kv_str("general.alignment", "32")); })),
       {"\"general.alignment\" has type string", "expected uint32"}},
      {"unknown_ggml_type", build(with([](Spec& s) { s.tensors[1].type = 4; })),
       {"tensor \"b\"", "unknown ggml type 4", "Q4_K=12"}},
      {"misaligned_offset", build(with([](Spec& s) { s.tensors[1].offset = 36; s.data_bytes = 104; })),
       {"tensor \"b\"", "data offset 36", "general.alignment = 32"}},
      {"tensor_past_eof", build(with([](Spec& s) { s.tensors[1].ne = {32, 3}; })),
       {"tensor \"b\"", "102 bytes at data offset 32", "ends past the end of the file", "holds 100 bytes"}},
      {"offset_past_eof", build(with([](Spec& s) { s.tensors[1].offset = 1ull << 62; })),
       {"tensor \"b\"", "ends past the end"}},
      {"overlap", build(with([](Spec& s) { s.tensors[0].ne = {16}; })),  // a now [0, 64), b at 32
       {"tensor \"b\" at data offset 32 overlaps tensor \"a\" at [0, 64)"}},
      {"n_dims_5", build(with([](Spec& s) { s.tensors[0].ne = {8, 1, 1, 1, 1}; })), {"tensor \"a\"", "n_dims = 5", "1..4"}},
      {"n_dims_0", build(with([](Spec& s) { s.tensors[0].ne = {}; })), {"tensor \"a\"", "n_dims = 0"}},
      {"zero_dim", build(with([](Spec& s) { s.tensors[1].ne = {32, 0}; })), {"tensor \"b\"", "ne[1] = 0"}},
      {"negative_dim", build(with([](Spec& s) { s.tensors[0].ne = {1ull << 63}; })),
       {"tensor \"a\"", "ne[0] = -9223372036854775808"}},
      {"numel_overflow", build(with([](Spec& s) { s.tensors[0].ne = {1ull << 32, 1ull << 32}; })),
       {"tensor \"a\"", "overflows int64"}},
      {"bytes_overflow", build(with([](Spec& s) { s.tensors[0].ne = {1ull << 62}; })),
       {"tensor \"a\"", "byte size overflows"}},
      {"not_block_multiple", build(with([](Spec& s) { s.tensors[1].ne = {16, 2}; })),
       {"tensor \"b\"", "ne[0] = 16", "Q8_0 block size 32"}},
      {"duplicate_tensor", build(with([](Spec& s) { s.tensors[1].name = "a"; })), {"tensor \"a\"", "duplicate tensor name"}},
      {"empty_tensor_name", build(with([](Spec& s) { s.tensors[1].name = ""; })), {"tensor #1", "empty tensor name"}},
      {"long_tensor_name", build(with([](Spec& s) { s.tensors[1].name = std::string(300, 'w'); })),
       {"tensor #1 name", "string length 300 exceeds the limit of 256"}},
      {"data_section_missing", [] { auto b = build(Spec()); b.resize(b.size() - 100 - 5); return b; }(),
       {"data section starts at offset", "truncated"}},
  };
}

TEST(GgufHeader, ValidFileParses) {
  GgufHeader h = parse(build(Spec()));
  EXPECT_EQ(h.version, 3u);
  EXPECT_EQ(h.alignment, 32u);
  ASSERT_EQ(h.kv.size(), 1u);
  EXPECT_EQ(h.kv[0].second.str, "llama");
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[1].type, GgmlType::kQ8_0);
  EXPECT_EQ(h.tensors[1].nbytes, 68u);
  EXPECT_EQ(h.tensors[1].shape(), (Shape{2, 32}));
  EXPECT_EQ(h.data_offset % 32, 0u);
}

TEST(GgufHeader, CornerCasesThatMustLoad) {
  // v2 has the v3 layout.
  EXPECT_EQ(parse(build(with([](Spec& s) { s.version = 2; }))).version, 2u);
  // No tensors and no data section at all.
  EXPECT_TRUE(parse(build(with([](Spec& s) { s.tensors = {}; s.data_bytes = 0; }))).tensors.empty());
  // Empty arrays, an array of empty arrays, a gap between tensors, alignment 64.
  auto h = parse(build(with([](Spec& s) {
    s.kv.push_back({"x.empty", 9, Bytes().u32(8).u64(0).b});
    s.kv.push_back({"x.nested", 9, Bytes().u32(9).u64(2).u32(4).u64(0).u32(0).u64(1).u8(7).b});
    s.kv.push_back(kv_u32("general.alignment", 64));
    s.alignment = 64;
    s.tensors[1].offset = 64;
    s.data_bytes = 132;
  })));
  EXPECT_EQ(h.alignment, 64u);
  EXPECT_EQ(h.data_offset % 64, 0u);
  EXPECT_EQ(h.kv[2].second.items.size(), 2u);
  EXPECT_EQ(h.kv[2].second.items[1].raw, (std::vector<uint8_t>{7}));
}

TEST(GgufHeader, CorruptInputsThrowNamedErrors) {
  for (const auto& c : bad_cases()) {
    SCOPED_TRACE(c.label);
    try {
      parse(c.bytes);
      ADD_FAILURE() << "expected Error";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind(kWhat, 0), 0u) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const auto& n : c.needles) EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
    }
  }
}

TEST(GgufHeader, EveryTruncationThrows) {
  // Cutting a valid file anywhere before the end of its last tensor is an
  // Error (never a crash, never a silent load).
  std::vector<uint8_t> full = build(with([](Spec& s) {
    s.kv.push_back({"x.arr", 9, Bytes().u32(8).u64(2).str("ab").str("c").b});
    s.kv.push_back({"x.f", 9, Bytes().u32(6).u64(2).u32(0).u32(0x3f800000).b});
  }));
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + n);
    EXPECT_THROW(parse(cut), Error) << "prefix of " << n << " bytes";
  }
  EXPECT_NO_THROW(parse(full));
}

TEST(GgufHeader, TypeTraits) {
  EXPECT_EQ(ggml_type_traits(12)->type_size, 144);
  EXPECT_STREQ(ggml_type_traits(14)->name, "Q6_K");
  EXPECT_EQ(ggml_type_traits(4), nullptr);
  EXPECT_EQ(ggml_type_traits(31), nullptr);
  EXPECT_STREQ(gguf_type_name(GgufType::kF64), "float64");
}

}  // namespace
}  // namespace blockspec
