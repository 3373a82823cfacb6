// parse_safetensors_header over hand-made bytes: every way a header can be
// wrong must throw Error naming the file and the tensor/field, and the valid
// corner cases the reference accepts must load.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "formats/safetensors.h"

namespace blockspec {
namespace {

constexpr const char* kWhat = "bad.safetensors";

// u64 LE N + header + data bytes (zeros).
std::vector<uint8_t> file_bytes(const std::string& header, size_t n_data = 0, int64_t n_override = -1) {
  uint64_t n = n_override >= 0 ? static_cast<uint64_t>(n_override) : header.size();
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + n_data, 0);
  return out;
}

SafetensorsHeader parse(const std::vector<uint8_t>& b) { return parse_safetensors_header(b.data(), b.size(), kWhat); }

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t b,
                  uint64_t e) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(b) + "," + std::to_string(e) + "]}";
}

struct BadCase {
  const char* label;
  std::vector<uint8_t> bytes;
  std::vector<std::string> needles;  // all must appear in the message
};

std::vector<BadCase> bad_cases() {
  const std::string a8 = entry("a", "F32", "[2]", 0, 8);
  return {
      {"truncated_length", {1, 0, 0}, {"3 bytes", "8-byte header length"}},
      {"n_too_big", file_bytes("{}", 0, 100'000'001), {"N = 100000001", "limit of 100000000"}},
      {"n_larger_than_file", file_bytes("{}", 0, 1000), {"N = 1000", "only 2 bytes"}},
      {"n_huge_u64", file_bytes("{}", 0, INT64_MAX), {"exceeds the limit"}},
      {"empty_header", file_bytes("", 0), {"must start with '{'", "empty header"}},
      {"not_an_object", file_bytes("[1,2]"), {"must start with '{'", "\"[\""}},
      {"leading_space", file_bytes(" {}"), {"must start with '{'"}},
      {"not_json", file_bytes("{abc}"), {"not valid JSON"}},
      {"number_overflow", file_bytes("{\"a\":1e99999}"), {"not valid JSON", "number overflow"}},
      {"huge_bad_token", file_bytes("{\"" + std::string(1'000'000, 'a')), {"not valid JSON"}},
      {"unterminated", file_bytes("{\"a\":"), {"not valid JSON"}},
      {"trailing_garbage", file_bytes("{}x"), {"not valid JSON"}},
      {"nul_padding", file_bytes(std::string("{}\0\0", 4)), {"NUL byte at header offset 2"}},
      {"nul_then_junk", file_bytes(std::string("{}\0junk", 7)), {"NUL byte"}},
      {"invalid_utf8_key", file_bytes("{\"a\xff\":1}"), {"not valid JSON", "\\xff"}},
      {"duplicate_tensor", file_bytes("{" + a8 + "," + entry("a", "F32", "[2]", 8, 16) + "}", 16),
       {"duplicate key \"a\"", "header"}},
      {"duplicate_escaped", file_bytes("{" + a8 + "," + entry("\\u0061", "F32", "[2]", 8, 16) + "}", 16),
       {"duplicate key \"a\""}},
      {"duplicate_field", file_bytes("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
       {"tensor \"a\"", "duplicate key \"dtype\""}},
      {"duplicate_metadata_key", file_bytes("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}"),
       {"__metadata__", "duplicate key \"k\""}},
      {"duplicate_metadata", file_bytes("{\"__metadata__\":{},\"__metadata__\":{}}"), {"duplicate key \"__metadata__\""}},
      {"bad_dtype", file_bytes("{" + entry("w.q", "F33", "[2]", 0, 8) + "}", 8),
       {"tensor \"w.q\"", "unknown dtype \"F33\"", "BF16"}},
      {"lowercase_dtype", file_bytes("{" + entry("w", "f32", "[2]", 0, 8) + "}", 8), {"unknown dtype \"f32\""}},
      {"dtype_not_string", file_bytes("{\"w\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
       {"tensor \"w\"", "field \"dtype\"", "number"}},
      {"hole", file_bytes("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 8, 12) + "}", 12),
       {"tensor \"b\"", "[8, 12]", "tensor \"a\" ends at 4", "hole of 4 bytes"}},
      {"overlap", file_bytes("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 4, 12) + "}", 12),
       {"tensor \"b\"", "overlap by 4 bytes"}},
      {"same_offsets", file_bytes("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 0, 8) + "}", 8),
       {"tensor \"b\"", "overlap by 8 bytes"}},
      {"first_not_at_zero", file_bytes("{" + entry("a", "F32", "[1]", 4, 8) + "}", 8),
       {"tensor \"a\"", "first tensor must start at 0"}},
      {"offsets_out_of_range", file_bytes("{" + entry("a", "F32", "[2]", 0, 8) + "}", 4),
       {"needs 8 + ", "has ", "truncated"}},
      {"end_before_begin", file_bytes("{" + entry("a", "F32", "[0]", 8, 0) + "}", 8),
       {"tensor \"a\"", "[8, 0] end before they begin"}},
      {"size_mismatch", file_bytes("{" + entry("model.layers.0.mlp.up_proj.weight", "BF16", "[8,8]", 0, 100) + "}", 100),
       {"bad.safetensors: tensor \"model.layers.0.mlp.up_proj.weight\": data_offsets [0, 100] hold 100 bytes but dtype "
        "BF16 shape [8, 8] needs 128"}},
      {"trailing_bytes", file_bytes("{" + a8 + "}", 9), {"1 trailing bytes"}},
      {"trailing_bytes_no_tensors", file_bytes("{}", 3), {"3 trailing bytes"}},
      {"negative_dim", file_bytes("{" + entry("a", "F32", "[-2]", 0, 8) + "}", 8), {"tensor \"a\"", "shape[0] is -2"}},
      {"float_dim", file_bytes("{" + entry("a", "F32", "[2.0]", 0, 8) + "}", 8),
       {"tensor \"a\"", "shape[0]: expected a non-negative integer", "2.0"}},
      {"string_dim", file_bytes("{" + entry("a", "F32", "[\"2\"]", 0, 8) + "}", 8), {"shape[0]", "string"}},
      {"shape_not_array", file_bytes("{" + entry("a", "F32", "2", 0, 8) + "}", 8), {"tensor \"a\"", "field \"shape\""}},
      {"overflow_dims", file_bytes("{" + entry("a", "F32", "[4294967296,4294967296]", 0, 8) + "}", 8),
       {"tensor \"a\"", "overflows"}},
      {"overflow_before_zero", file_bytes("{" + entry("a", "F32", "[4294967296,4294967296,0]", 0, 0) + "}"),
       {"tensor \"a\"", "overflows"}},
      {"overflow_bits", file_bytes("{" + entry("a", "F64", "[2305843009213693952]", 0, 8) + "}", 8), {"overflows"}},
      {"dim_above_int64", file_bytes("{" + entry("a", "U8", "[18446744073709551615]", 0, 8) + "}", 8),
       {"shape[0] is 18446744073709551615"}},
      {"dim_above_u64", file_bytes("{" + entry("a", "U8", "[18446744073709551616]", 0, 8) + "}", 8),
       {"shape[0]: expected a non-negative integer"}},
      {"sub_byte", file_bytes("{" + entry("a", "F4", "[3]", 0, 2) + "}", 2), {"tensor \"a\"", "12 bits"}},
      {"metadata_non_string", file_bytes("{\"__metadata__\":{\"gptq_bits\":4}}"),
       {"__metadata__ key \"gptq_bits\"", "expected a string", "number 4"}},
      {"metadata_nested", file_bytes("{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}"), {"__metadata__ key \"k\""}},
      {"metadata_not_object", file_bytes("{\"__metadata__\":\"pt\"}"), {"__metadata__", "expected an object"}},
      {"missing_dtype", file_bytes("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
       {"tensor \"a\"", "missing field \"dtype\""}},
      {"missing_shape", file_bytes("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8), {"missing field \"shape\""}},
      {"missing_offsets", file_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8), {"missing field \"data_offsets\""}},
      {"extra_field", file_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"quant\":\"q4\"}}", 8),
       {"tensor \"a\"", "unknown field \"quant\""}},
      {"offsets_three", file_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8),
       {"tensor \"a\"", "data_offsets", "expected [BEGIN, END]"}},
      {"offsets_negative", file_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8),
       {"data_offsets[0] is -8"}},
      {"entry_not_object", file_bytes("{\"a\":[1]}"), {"tensor \"a\"", "expected an object"}},
      {"too_deep", file_bytes("{\"a\":{\"shape\":[[2]]}}"), {"tensor \"a\" field \"shape\"", "nested deeper"}},
      {"very_deep", file_bytes("{\"a\":" + std::string(100000, '[') + "}"), {"tensor \"a\": JSON nested deeper"}},
      {"control_char_name", file_bytes("{\"a\\nb\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,1]}}", 1),
       {"tensor \"a\\x0ab\"", "unknown dtype"}},
  };
}

TEST(SafetensorsHeader, RejectsCorruptInputs) {
  for (const auto& c : bad_cases()) {
    SCOPED_TRACE(c.label);
    try {
      parse(c.bytes);
      ADD_FAILURE() << c.label << ": parsed without error";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind(std::string(kWhat) + ": ", 0), 0u) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
      EXPECT_LT(msg.size(), 1000u) << msg.substr(0, 2000);
      // Every name in these cases is ASCII, so the whole message must be.
      for (char ch : msg) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << "non-printable byte in: " << msg;
      for (const auto& n : c.needles) EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
    }
  }
}

TEST(SafetensorsHeader, EveryTruncationOfAValidFileFails) {
  std::string h = "{\"__metadata__\":{\"format\":\"pt\"}," + entry("b", "BF16", "[2,2]", 8, 16) + "," +
                  entry("a", "F32", "[2]", 0, 8) + "}";
  auto full = file_bytes(h, 16);
  EXPECT_NO_THROW(parse(full));
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + n);
    EXPECT_THROW(parse(cut), Error) << "prefix of " << n << " bytes";
  }
}

TEST(SafetensorsHeader, ParsesValidCorners) {
  // Listed out of offset order, padded with spaces and a trailing newline; a
  // scalar, a zero-size tensor and sub-byte F4 with an even count.
  std::string h = "{" + entry("z", "F16", "[3]", 8, 14) + "," + entry("s", "F32", "[]", 0, 4) + "," +
                  entry("e", "BF16", "[0,5]", 4, 4) + "," + entry("f4", "F4", "[2,2]", 4, 6) + "," +
                  entry("p", "U8", "[2]", 6, 8) + ",\"__metadata__\":{\"format\":\"pt\"}} \n\t ";
  auto h2 = parse(file_bytes(h, 14));
  EXPECT_EQ(h2.header_len, h.size());
  EXPECT_EQ(h2.metadata.at("format"), "pt");
  ASSERT_EQ(h2.entries.size(), 5u);
  std::vector<std::string> order;
  for (const auto& e : h2.entries) order.push_back(e.name);
  // Sorted by begin; e (empty, [4,4]) sorts before f4 ([4,6]).
  EXPECT_EQ(order, (std::vector<std::string>{"s", "e", "f4", "p", "z"}));
  EXPECT_EQ(h2.entries[0].shape, Shape{});
  EXPECT_EQ(h2.entries[1].shape, (Shape{0, 5}));
  EXPECT_EQ(h2.entries[2].dtype, DType::kF4);
  EXPECT_EQ(h2.entries[4].dtype, DType::kF16);
  EXPECT_EQ(h2.entries[4].begin, 8u);
  EXPECT_EQ(h2.entries[4].end, 14u);
}

TEST(SafetensorsHeader, AcceptsWhatTheReferenceAccepts) {
  EXPECT_TRUE(parse(file_bytes("{}")).entries.empty());
  EXPECT_TRUE(parse(file_bytes("{}      ")).metadata.empty());
  EXPECT_TRUE(parse(file_bytes("{\"__metadata__\":null}")).metadata.empty());
  EXPECT_TRUE(parse(file_bytes("{\"__metadata__\":{}}")).metadata.empty());
  auto h = parse(file_bytes("{" + entry("a\\u00e9", "F32", "[2]", 0, 8) + "}", 8));
  EXPECT_EQ(h.entries.at(0).name, "a\xc3\xa9");
  // Only zero-size tensors: no data at all.
  EXPECT_EQ(parse(file_bytes("{" + entry("e", "I64", "[3,0]", 0, 0) + "}")).entries.size(), 1u);
  // The same key in different objects is not a duplicate.
  EXPECT_NO_THROW(parse(file_bytes("{\"__metadata__\":{\"dtype\":\"x\"}," + entry("dtype", "U8", "[1]", 0, 1) + "}", 1)));
}

TEST(SafetensorsIndex, ParsesAndRejects) {
  auto idx = parse_safetensors_index(
      R"({"metadata":{"total_size":16,"total_parameters":4},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})",
      "model.safetensors.index.json");
  EXPECT_EQ(idx.weight_map.size(), 2u);
  EXPECT_EQ(idx.weight_map.at("b"), "s2.safetensors");
  EXPECT_EQ(idx.total_size, 16u);

  struct Bad {
    const char* text;
    const char* needle;
  };
  for (const Bad& b : {Bad{"{", "not valid JSON"}, Bad{"[]", "expected a JSON object"},
                       Bad{"{\"metadata\":{}}", "missing field \"weight_map\""},
                       Bad{"{\"weight_map\":[]}", "field \"weight_map\""},
                       Bad{"{\"weight_map\":{\"a\":1}}", "tensor \"a\""},
                       Bad{"{\"weight_map\":{\"a\":\"x\",\"a\":\"y\"}}", "\"weight_map\": duplicate key \"a\""},
                       Bad{"{\"metadata\":{\"total_size\":-1},\"weight_map\":{}}", "total_size"}}) {
    try {
      parse_safetensors_index(b.text, "idx.json");
      ADD_FAILURE() << b.text;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind("idx.json: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(b.needle), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace blockspec
