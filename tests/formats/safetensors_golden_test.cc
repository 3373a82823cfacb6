// Golden test against the reference implementation (safetensors 0.8.0
// save_file, huggingface_hub sharding): fixtures and manifest come from
// scripts/make_safetensors_golden.py. We read every reference file and check
// every byte and value, and re-write every file with write_safetensors, which
// must reproduce the reference bytes exactly. differential.json adds 400
// random and corrupted headers with the reference reader's verdict on each.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "formats/safetensors.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kDir = std::string(BS_SOURCE_DIR) + "/tests/fixtures/safetensors";

json manifest() { return json::parse(read_text_file(kDir + "/manifest.json")); }

std::string hex(const void* p, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    uint8_t b = static_cast<const uint8_t*>(p)[i];
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

std::vector<uint8_t> unhex(const std::string& s) {
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return out;
}

template <class T>
T load(const Tensor& t, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(t.data()) + i * sizeof(T), sizeof(T));
  return v;
}

// Element i decoded as a double, for the dtypes whose decoding we own here;
// nullopt for FP8 (checked through its bytes only).
std::optional<double> value_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return load<float>(t, i);
    case DType::kF64: return load<double>(t, i);
    case DType::kBF16: return bf16_to_f32(load<uint16_t>(t, i));
    case DType::kF16: return f16_to_f32(load<uint16_t>(t, i));
    case DType::kI64: return static_cast<double>(load<int64_t>(t, i));
    case DType::kI32: return load<int32_t>(t, i);
    case DType::kI16: return load<int16_t>(t, i);
    case DType::kU16: return load<uint16_t>(t, i);
    case DType::kI8: return load<int8_t>(t, i);
    case DType::kU8:
    case DType::kBool: return load<uint8_t>(t, i);
    default: return std::nullopt;
  }
}

void check_tensor(const std::string& name, const Tensor& t, const json& want) {
  SCOPED_TRACE(name);
  EXPECT_EQ(dtype_name(t.dtype()), want["dtype"].get<std::string>());
  EXPECT_EQ(t.shape(), want["shape"].get<Shape>());
  EXPECT_EQ(hex(t.data(), t.nbytes()), want["bytes_hex"].get<std::string>());
  const json& values = want["values"];
  ASSERT_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    auto v = value_at(t, i);
    if (!v) break;
    EXPECT_EQ(*v, values[i].get<double>()) << "element " << i;
  }
}

std::string scratch(const std::string& name) {
  fs::path dir = fs::path(BS_BINARY_DIR) / "test_scratch" / ("safetensors_golden_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

TEST(SafetensorsGolden, ReadsEveryReferenceFile) {
  const json m = manifest();
  ASSERT_GE(m["files"].size(), 5u);
  for (const auto& [file, want] : m["files"].items()) {
    SCOPED_TRACE(file);
    SafetensorsFile f(kDir + "/" + file);
    EXPECT_EQ(f.metadata(), (want["metadata"].get<std::map<std::string, std::string>>()));
    EXPECT_EQ(f.entries().size(), want["tensors"].size());
    for (const auto& [name, t] : want["tensors"].items()) check_tensor(name, f.tensor(name), t);
  }
}

// Writes `tensors` and requires the exact bytes of the reference file.
void expect_same_bytes(const std::string& file, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string out = scratch(fs::path(file).filename().string());
  write_safetensors(out, tensors, metadata);
  const std::string ours = read_text_file(out), ref = read_text_file(kDir + "/" + file);
  fs::remove(out);
  EXPECT_EQ(ours.size(), ref.size());
  if (ours != ref) {
    size_t i = 0;
    while (i < std::min(ours.size(), ref.size()) && ours[i] == ref[i]) ++i;
    ADD_FAILURE() << file << ": first differing byte at " << i << "\n ours: " << ours.substr(0, 300)
                  << "\n  ref: " << ref.substr(0, 300);
  }
}

TEST(SafetensorsGolden, WriterIsByteIdenticalFromReadTensors) {
  const json m = manifest();
  for (const auto& [file, want] : m["files"].items()) {
    SCOPED_TRACE(file);
    SafetensorsFile f(kDir + "/" + file);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& e : f.entries()) tensors.emplace_back(e.name, f.tensor(e.name));
    // Hand them over in reverse name order: the writer's sort must restore the layout.
    std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    expect_same_bytes(file, tensors, f.metadata());
  }
}

TEST(SafetensorsGolden, WriterIsByteIdenticalFromManifestValues) {
  // Tensors built from the manifest alone, so this does not lean on our reader.
  const json m = manifest();
  for (const auto& [file, want] : m["files"].items()) {
    SCOPED_TRACE(file);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [name, t] : want["tensors"].items()) {
      Tensor owned(*dtype_from_name(t["dtype"].get<std::string>()), t["shape"].get<Shape>());
      std::vector<uint8_t> bytes = unhex(t["bytes_hex"].get<std::string>());
      ASSERT_EQ(bytes.size(), owned.nbytes());
      if (!bytes.empty()) std::memcpy(owned.mutable_data(), bytes.data(), bytes.size());
      tensors.emplace_back(name, owned);
    }
    expect_same_bytes(file, tensors, want["metadata"].get<std::map<std::string, std::string>>());
  }
}

TEST(SafetensorsGolden, ShardedCheckpoint) {
  const json m = manifest();
  const json& sh = m["sharded"];
  const std::string dir = kDir + "/" + sh["dir"].get<std::string>();
  SafetensorsCheckpoint ck(dir);
  std::vector<std::string> want_names;
  for (const auto& [name, shard] : sh["weight_map"].items()) {
    want_names.push_back(name);
    EXPECT_EQ(fs::path(ck.file_of(name)).filename().string(), shard.get<std::string>()) << name;
    const json& t = m["files"][sh["dir"].get<std::string>() + "/" + shard.get<std::string>()]["tensors"][name];
    check_tensor(name, ck.tensor(name), t);
  }
  EXPECT_EQ(ck.names(), want_names);
  EXPECT_EQ(ck.total_bytes(), sh["total_size"].get<uint64_t>());
  // The index file itself is an accepted path too.
  EXPECT_EQ(SafetensorsCheckpoint(dir + "/model.safetensors.index.json").names(), want_names);
}

// Same accept/reject verdict as the reference reader on random valid files
// and structured corruptions of them (fixtures/safetensors/differential.json).
TEST(SafetensorsGolden, SameVerdictsAsReferenceReader) {
  const json d = json::parse(read_text_file(kDir + "/differential.json"));
  const json& cases = d["cases"];
  ASSERT_GE(cases.size(), 300u);
  int n_accept = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string header = cases[i]["header"].get<std::string>();
    const bool want = cases[i]["accept"].get<bool>();
    std::vector<uint8_t> bytes(8);
    for (int k = 0; k < 8; ++k) bytes[k] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * k));
    bytes.insert(bytes.end(), header.begin(), header.end());
    bytes.resize(bytes.size() + cases[i]["data_len"].get<size_t>(), 0x5a);
    std::string error;
    try {
      parse_safetensors_header(bytes.data(), bytes.size(), "case.safetensors");
    } catch (const Error& e) {
      error = e.what();
    }
    n_accept += want;
    EXPECT_EQ(error.empty(), want) << "case " << i << ": reference " << (want ? "accepts" : "rejects") << " "
                                   << header << (error.empty() ? "" : "\n ours: " + error);
  }
  EXPECT_GT(n_accept, 50);
}

}  // namespace
}  // namespace blockspec
