// SafetensorsFile, SafetensorsCheckpoint (single and sharded) and
// write_safetensors, on files written into a scratch directory.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "formats/safetensors.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::path(BS_BINARY_DIR) / "test_scratch" /
            (std::string("safetensors_") + info->test_suite_name() + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

Tensor f32_tensor(Shape shape, float start) {
  Tensor t(DType::kF32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_ptr<float>()[i] = start + static_cast<float>(i);
  return t;
}

std::string read_bytes(const std::string& path) { return read_text_file(path); }

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(SafetensorsWrite, MatchesSerdeCompactLayout) {
  ScratchDir dir;
  write_safetensors(dir / "a.safetensors", {{"a", f32_tensor({2}, 1)}}, {{"format", "pt"}});
  std::string bytes = read_bytes(dir / "a.safetensors");
  std::string want = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  want.append((8 - want.size() % 8) % 8, ' ');
  ASSERT_EQ(bytes.size(), 8 + want.size() + 8);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n, want.size());
  EXPECT_EQ(bytes.substr(8, n), want);
}

TEST(SafetensorsWrite, SortsByDTypeThenNameAndRoundTrips) {
  ScratchDir dir;
  Tensor bf(DType::kBF16, {3});
  for (int i = 0; i < 3; ++i) bf.mutable_ptr<uint16_t>()[i] = f32_to_bf16(0.5f * i);
  Tensor i8(DType::kI8, {2, 2});
  for (int i = 0; i < 4; ++i) i8.mutable_ptr<int8_t>()[i] = static_cast<int8_t>(-i);
  Tensor scalar = f32_tensor({}, 7);
  Tensor empty(DType::kI64, {0, 3});
  const std::string p = dir / "m.safetensors";
  write_safetensors(p, {{"i8", i8}, {"b", bf}, {"scalar", scalar}, {"a.x", f32_tensor({2, 3}, 0)}, {"e", empty}});

  SafetensorsFile f(p);
  std::vector<std::string> order;
  for (const auto& e : f.entries()) order.push_back(e.name);
  // I64 > F32 > BF16 > I8 in safetensors' enum order; names in byte order.
  EXPECT_EQ(order, (std::vector<std::string>{"e", "a.x", "scalar", "b", "i8"}));
  EXPECT_TRUE(f.metadata().empty());
  Tensor ax = f.tensor("a.x");
  EXPECT_EQ(ax.shape(), (Shape{2, 3}));
  EXPECT_EQ(ax.ptr<float>()[5], 5.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ax.data()) % 4, 0u) << "F32 data not naturally aligned";
  EXPECT_EQ(f.tensor("scalar").ptr<float>()[0], 7.0f);
  EXPECT_EQ(f.tensor("scalar").numel(), 1);
  EXPECT_EQ(bf16_to_f32(f.tensor("b").ptr<uint16_t>()[2]), 1.0f);
  EXPECT_EQ(f.tensor("i8").ptr<int8_t>()[3], -3);
  EXPECT_EQ(f.tensor("e").numel(), 0);
  EXPECT_EQ(f.entry("e").begin, f.entry("e").end);
}

TEST(SafetensorsWrite, RejectsBadInputs) {
  ScratchDir dir;
  const std::string p = dir / "bad.safetensors";
  EXPECT_NE(error_of([&] { write_safetensors(p, {{"a", f32_tensor({1}, 0)}, {"a", f32_tensor({1}, 0)}}); })
                .find("tensor \"a\" is given twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_safetensors(p, {{"__metadata__", f32_tensor({1}, 0)}}); }).find("reserved"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_safetensors(p, {{"bad\xff", f32_tensor({1}, 0)}}); }).find("UTF-8"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_safetensors(p, {{"f4", Tensor(DType::kF4, {3})}}); }).find("whole number of bytes"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_safetensors(dir / "no/such/dir/x.safetensors", {}); }).find("cannot open"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(p));
}

TEST(SafetensorsFile, ViewOutlivesFileObject) {
  ScratchDir dir;
  const std::string p = dir / "m.safetensors";
  write_safetensors(p, {{"w", f32_tensor({4}, 10)}});
  Tensor w;
  {
    SafetensorsFile f(p);
    w = f.tensor("w");
  }
  EXPECT_EQ(w.ptr<float>()[3], 13.0f);
}

TEST(SafetensorsFile, ErrorsNamePathAndTensor) {
  ScratchDir dir;
  const std::string p = dir / "m.safetensors";
  write_safetensors(p, {{"w", f32_tensor({4}, 10)}});
  SafetensorsFile f(p);
  std::string msg = error_of([&] { f.entry("missing.weight"); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"missing.weight\""), std::string::npos) << msg;
  msg = error_of([&] { SafetensorsFile g(dir / "nope.safetensors"); });
  EXPECT_NE(msg.find("nope.safetensors"), std::string::npos) << msg;
  // A corrupt file: the path leads the message.
  write_text(dir / "junk.safetensors", "not a safetensors file at all");
  msg = error_of([&] { SafetensorsFile g(dir / "junk.safetensors"); });
  EXPECT_EQ(msg.rfind(dir / "junk.safetensors", 0), 0u) << msg;
}

TEST(SafetensorsCheckpoint, SingleFileAndDirectory) {
  ScratchDir dir;
  write_safetensors(dir / "model.safetensors", {{"b", f32_tensor({2}, 0)}, {"a", f32_tensor({3}, 5)}});
  for (const std::string& p : {dir.str(), dir / "model.safetensors"}) {
    SafetensorsCheckpoint ck(p);
    EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(ck.tensor("a").ptr<float>()[2], 7.0f);
    EXPECT_EQ(ck.file_of("b"), dir / "model.safetensors");
    EXPECT_EQ(ck.total_bytes(), 20u);
    std::string msg = error_of([&] { ck.tensor("c"); });
    EXPECT_NE(msg.find("\"c\""), std::string::npos) << msg;
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
}

TEST(SafetensorsCheckpoint, EmptyDirectoryIsAClearError) {
  ScratchDir dir;
  std::string msg = error_of([&] { SafetensorsCheckpoint ck(dir.str()); });
  EXPECT_NE(msg.find(dir.str()), std::string::npos) << msg;
  EXPECT_NE(msg.find("neither model.safetensors nor model.safetensors.index.json"), std::string::npos) << msg;
}

// Two shards: s1 = {a, b}, s2 = {c}; `extra` adds tensors to s2 unlisted.
void make_shards(const ScratchDir& dir, const std::string& weight_map,
                 std::vector<std::pair<std::string, Tensor>> extra = {}) {
  write_safetensors(dir / "model-00001-of-00002.safetensors", {{"a", f32_tensor({2}, 0)}, {"b", f32_tensor({1}, 2)}});
  extra.emplace_back("c", f32_tensor({3}, 3));
  write_safetensors(dir / "model-00002-of-00002.safetensors", extra);
  write_text(dir / "model.safetensors.index.json",
             "{\"metadata\": {\"total_size\": 24}, \"weight_map\": {" + weight_map + "}}\n");
}

const char* kS1 = "model-00001-of-00002.safetensors";
const char* kS2 = "model-00002-of-00002.safetensors";
std::string map_entry(const std::string& t, const std::string& s) { return "\"" + t + "\": \"" + s + "\""; }
std::string good_map() {
  return map_entry("a", kS1) + ", " + map_entry("b", kS1) + ", " + map_entry("c", kS2);
}

TEST(SafetensorsCheckpoint, Sharded) {
  ScratchDir dir;
  make_shards(dir, good_map());
  for (const std::string& p : {dir.str(), dir / "model.safetensors.index.json"}) {
    SafetensorsCheckpoint ck(p);
    EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(ck.file_of("c"), dir / kS2);
    EXPECT_EQ(ck.tensor("c").ptr<float>()[2], 5.0f);
    EXPECT_EQ(ck.entry("b").shape, Shape{1});
    EXPECT_EQ(ck.total_bytes(), 24u);
  }
}

TEST(SafetensorsCheckpoint, UnlistedTensorIsServedFromItsShard) {
  ScratchDir dir;
  make_shards(dir, good_map(), {{"d", f32_tensor({1}, 9)}});
  SafetensorsCheckpoint ck(dir.str());
  EXPECT_TRUE(ck.has("d"));
  EXPECT_EQ(ck.file_of("d"), dir / kS2);
}

TEST(SafetensorsCheckpoint, ShardingErrors) {
  struct Case {
    const char* label;
    std::string weight_map;
    std::vector<std::pair<std::string, Tensor>> extra;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"missing_shard", good_map() + ", " + map_entry("z", "model-00003-of-00003.safetensors"), {},
       {"tensor \"z\"", "model-00003-of-00003.safetensors", "does not exist"}},
      {"tensor_not_in_shard", good_map() + ", " + map_entry("z", kS1), {},
       {"tensor \"z\"", kS1, "does not hold it", "no listed shard"}},
      {"tensor_in_other_shard", map_entry("a", kS1) + ", " + map_entry("b", kS2) + ", " + map_entry("c", kS2), {},
       {"tensor \"b\"", "does not hold it", "(it is in ", kS1}},
      {"duplicate_across_shards", good_map(), {{"a", f32_tensor({2}, 0)}},
       {"tensor \"a\"", "two shards", kS1, kS2}},
      {"escaping_shard_name", map_entry("a", "../model.safetensors"), {}, {"\"../model.safetensors\"", "relative"}},
      {"absolute_shard_name", map_entry("a", "/etc/passwd"), {}, {"\"/etc/passwd\""}},
      {"empty_weight_map", "", {}, {"weight_map is empty"}},
      {"duplicate_weight_map_key", good_map() + ", " + map_entry("a", kS2), {}, {"duplicate key \"a\""}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    ScratchDir dir;
    make_shards(dir, c.weight_map, c.extra);
    std::string msg = error_of([&] { SafetensorsCheckpoint ck(dir.str()); });
    EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
    for (const auto& n : c.needles) EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
  }
}

TEST(SafetensorsCheckpoint, CorruptShardNamesTheShard) {
  ScratchDir dir;
  make_shards(dir, good_map());
  write_text(dir / kS2, std::string(8, '\0'));
  std::string msg = error_of([&] { SafetensorsCheckpoint ck(dir.str()); });
  EXPECT_NE(msg.find(kS2), std::string::npos) << msg;
}

}  // namespace
}  // namespace blockspec
