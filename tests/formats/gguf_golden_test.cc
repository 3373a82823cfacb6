// GGUF reader + dequantizers against the reference gguf-py 0.19.0
// (scripts/make_gguf_golden.py): files written by its GGUFWriter, values
// from its gguf.quants.dequantize, compared bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/gguf_dequant.h"
#include "formats/safetensors.h"

namespace blockspec {
namespace {

std::string fixture(const std::string& name) { return std::string(BS_SOURCE_DIR) + "/tests/fixtures/gguf/" + name; }

// Every tensor of `ref` must be present in `gguf`, dequantize to the same
// shape and the same bytes (memcmp, so -0.0 and NaN payloads count).
void expect_matches_reference(const std::string& gguf_name, const std::string& ref_name, size_t n_expected) {
  GgufFile f(fixture(gguf_name));
  SafetensorsFile ref(fixture(ref_name));
  ASSERT_EQ(ref.entries().size(), n_expected);
  ASSERT_EQ(f.tensors().size(), n_expected);
  for (const auto& e : ref.entries()) {
    SCOPED_TRACE(e.name);
    const GgufTensorInfo& info = f.tensor_info(e.name);
    ASSERT_TRUE(gguf_can_dequantize(info.type)) << ggml_type_name(info.type);
    Tensor got = dequantize_gguf_tensor(f, e.name);
    Tensor want = ref.tensor(e.name);
    ASSERT_EQ(got.shape(), want.shape()) << ggml_type_name(info.type);
    ASSERT_EQ(want.dtype(), DType::kF32);
    size_t n_diff = 0;
    for (int64_t i = 0; i < got.numel(); ++i)
      if (std::memcmp(got.ptr<float>() + i, want.ptr<float>() + i, 4) != 0 && n_diff++ < 5)
        ADD_FAILURE() << ggml_type_name(info.type) << " element " << i << ": got " << got.ptr<float>()[i]
                      << ", reference " << want.ptr<float>()[i];
    EXPECT_EQ(n_diff, 0u) << ggml_type_name(info.type);
  }
}

TEST(GgufGolden, RandomBlocksOfEveryTypeMatchReference) {
  // f32 f16 bf16, 10 block types, q8_0_3d
  expect_matches_reference("types.gguf", "types_ref.safetensors", 14);
}

TEST(GgufGolden, RealModelSlicesMatchReference) {
  // SmolLM2 Q8_0 / Q4_1 / F32 rows and Qwen2.5-Coder Q4_K / Q6_K rows.
  expect_matches_reference("real_slices.gguf", "real_slices_ref.safetensors", 7);
}

TEST(GgufGolden, TensorInfoAndAlignment) {
  GgufFile f(fixture("types.gguf"));
  EXPECT_EQ(f.header().version, 3u);
  EXPECT_EQ(f.header().alignment, 64u);
  EXPECT_EQ(f.header().data_offset % 64, 0u);
  const GgufTensorInfo& q4k = f.tensor_info("q4_k");
  EXPECT_EQ(q4k.type, GgmlType::kQ4_K);
  EXPECT_EQ(q4k.ne, (std::vector<int64_t>{512, 2}));
  EXPECT_EQ(q4k.shape(), (Shape{2, 512}));
  EXPECT_EQ(q4k.nbytes, 4u * 144);
  const GgufTensorInfo& q3d = f.tensor_info("q8_0_3d");
  EXPECT_EQ(q3d.shape(), (Shape{2, 2, 32}));
  for (const auto& t : f.tensors()) {
    EXPECT_EQ(t.offset % 64, 0u) << t.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f.tensor_data(t)) % 64, 0u) << t.name;  // mmap is page aligned
  }
}

TEST(GgufGolden, MetadataOfEveryValueType) {
  GgufFile f(fixture("types.gguf"));
  EXPECT_EQ(f.get_string("general.architecture"), "test");
  EXPECT_EQ(f.value("test.u8").type, GgufType::kU8);
  EXPECT_EQ(f.get_int("test.u8"), 200);
  EXPECT_EQ(f.get_int("test.i8"), -100);
  EXPECT_EQ(f.get_int("test.u16"), 60000);
  EXPECT_EQ(f.get_int("test.i16"), -30000);
  EXPECT_EQ(f.get_int("test.u32"), 4000000000LL);
  EXPECT_EQ(f.get_int("test.i32"), -2000000000LL);
  EXPECT_EQ(f.get_float("test.f32"), static_cast<double>(0.1f));
  EXPECT_TRUE(f.get_bool("test.bool"));
  EXPECT_EQ(f.get_string("test.string"), "h\xc3\xa9llo\nw\xc3\xb6rld");
  EXPECT_EQ(f.value("test.u64").bits, 18000000000000000000ULL);
  EXPECT_EQ(f.get_int("test.i64"), -9000000000000000000LL);
  EXPECT_EQ(f.get_float("test.f64"), -2.5e-300);
  EXPECT_EQ(f.get_int_array("test.array_i32"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.value("test.array_i32").type_str(), "array[int32]");
  EXPECT_EQ(f.get_float_array("test.array_f32"), (std::vector<double>{0.5, -1.25}));
  EXPECT_EQ(f.value("test.array_bool").raw, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(f.get_string_array("test.array_str"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.get_int_array("test.array_u8"), (std::vector<int64_t>{1, 255}));
  const GgufValue& nested = f.value("test.array_nested");
  ASSERT_EQ(nested.elem_type, GgufType::kArray);
  ASSERT_EQ(nested.items.size(), 2u);
  EXPECT_EQ(nested.items[0].elem_type, GgufType::kI32);
  EXPECT_EQ(nested.items[0].n_elems, 2u);
  EXPECT_EQ(nested.items[1].strs, (std::vector<std::string>{"x", "yz"}));
  // u64 above INT64_MAX is refused by get_int, not wrapped.
  try {
    f.get_int("test.u64");
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"test.u64\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace blockspec
