// Loading a checkpoint that disagrees with its config fails with one error
// naming the file, the tensor, and expected vs found; never loads silently.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "formats/safetensors.h"
#include "model/transformer.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;
const std::string kSrc = std::string(BS_SOURCE_DIR) + "/tests/fixtures/golden/qwen3-tiny-bf16";

class BrokenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bs_weights_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    fs::copy_file(kSrc + "/config.json", dir_ / "config.json", fs::copy_options::overwrite_existing);
    SafetensorsFile f(kSrc + "/model.safetensors");
    for (const auto& e : f.entries()) tensors_.emplace_back(e.name, f.tensor(e.name));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the (edited) tensors and returns the load error ("" if it loaded).
  std::string load_error() {
    write_safetensors((dir_ / "model.safetensors").string(), tensors_);
    try {
      Transformer::load(dir_.string(), ModelOptions{});
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  Tensor* find(const std::string& name) {
    for (auto& [n, t] : tensors_)
      if (n == name) return &t;
    return nullptr;
  }

  fs::path dir_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

TEST_F(BrokenCheckpoint, IntactLoads) { EXPECT_EQ(load_error(), ""); }

TEST_F(BrokenCheckpoint, MissingTensorNamed) {
  const std::string name = "model.layers.1.self_attn.k_norm.weight";
  std::erase_if(tensors_, [&](const auto& p) { return p.first == name; });
  std::string e = load_error();
  EXPECT_NE(e.find(name), std::string::npos) << e;
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
  EXPECT_NE(e.find(dir_.string()), std::string::npos) << e;
}

TEST_F(BrokenCheckpoint, WrongShapeNamedWithExpectedAndFound) {
  const std::string name = "model.layers.0.mlp.up_proj.weight";
  Tensor* t = find(name);
  ASSERT_NE(t, nullptr);
  *t = Tensor(DType::kBF16, {t->dim(0) - 1, t->dim(1)});
  std::string e = load_error();
  EXPECT_NE(e.find(name), std::string::npos) << e;
  EXPECT_NE(e.find("[159, 64]"), std::string::npos) << e;
  EXPECT_NE(e.find("[160, 64]"), std::string::npos) << e;
}

TEST_F(BrokenCheckpoint, UnsupportedDtypeNamed) {
  const std::string name = "model.layers.2.self_attn.o_proj.weight";
  Tensor* t = find(name);
  ASSERT_NE(t, nullptr);
  *t = Tensor(DType::kI32, t->shape());
  std::string e = load_error();
  EXPECT_NE(e.find(name), std::string::npos) << e;
  EXPECT_NE(e.find("I32"), std::string::npos) << e;
}

TEST_F(BrokenCheckpoint, MissingLmHeadWhenUntied) {
  std::erase_if(tensors_, [&](const auto& p) { return p.first == "lm_head.weight"; });
  EXPECT_NE(load_error().find("lm_head.weight"), std::string::npos);
}

TEST_F(BrokenCheckpoint, ConfigShapeDisagreement) {
  std::string cfg;
  {
    std::ifstream f(dir_ / "config.json");
    cfg.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto pos = cfg.find("\"intermediate_size\": 160");
  ASSERT_NE(pos, std::string::npos);
  cfg.replace(pos, 24, "\"intermediate_size\": 128");
  std::ofstream(dir_ / "config.json") << cfg;
  std::string e = load_error();
  EXPECT_NE(e.find("gate_proj"), std::string::npos) << e;
  EXPECT_NE(e.find("model config"), std::string::npos) << e;
}

TEST_F(BrokenCheckpoint, NoCheckpointFiles) {
  write_safetensors((dir_ / "model.safetensors").string(), tensors_);
  fs::remove(dir_ / "model.safetensors");
  EXPECT_THROW(Transformer::load(dir_.string(), ModelOptions{}), Error);
  fs::remove(dir_ / "config.json");
  try {
    Transformer::load(dir_.string(), ModelOptions{});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace blockspec
