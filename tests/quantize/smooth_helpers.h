// Helpers of the SmoothQuant / SmoothAttention tests (smooth_test.cc, smooth_attention_test.cc): random token
// windows and a copy of an HF checkpoint with some tensors replaced on disk.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "base/thread_pool.h"
#include "formats/safetensors.h"
#include "kernels/kernel_table.h"
#include "model/transformer.h"
#include "model/weight_overlay.h"
#include "tensor/tensor.h"

namespace blockspec::smooth_test {

namespace fs = std::filesystem;
inline const std::string kSrc = BS_SOURCE_DIR;
inline const std::string kGolden = kSrc + "/tests/fixtures/golden/";

inline std::string tmp_dir(const std::string& name) {
  const std::string d = (fs::temp_directory_path() / ("bs_smooth_test_" + std::to_string(getpid()) + "_" + name)).string();
  fs::remove_all(d);
  return d;
}

inline std::vector<int32_t> random_ids(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(n);
  for (int32_t& t : ids) t = static_cast<int32_t>(rng() % 500);
  return ids;
}

inline std::vector<std::vector<int32_t>> windows_of(const std::vector<int32_t>& ids, size_t w) {
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < ids.size(); i += w) out.emplace_back(ids.begin() + i, ids.begin() + std::min(ids.size(), i + w));
  return out;
}

inline std::vector<float> f32_of(const Tensor& t) {
  const Tensor f = to_f32(t);
  return std::vector<float>(f.ptr<float>(), f.ptr<float>() + f.numel());
}

inline std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// A copy of the HF directory `in` (config, tokenizer, model.safetensors) with the tensors of `edits` replaced
// on disk, each in its stored dtype (F32 or BF16).
inline void write_edited(const std::string& in, const std::string& out, const TensorOverrides& edits) {
  fs::create_directories(out);
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json"})
    if (fs::exists(in + "/" + f)) fs::copy_file(in + "/" + f, out + "/" + f);
  SafetensorsCheckpoint ck(in);
  std::vector<std::pair<std::string, Tensor>> ts;
  for (const std::string& n : ck.names()) {
    const Tensor t = ck.tensor(n);
    const auto it = edits.find(n);
    if (it == edits.end()) {
      ts.emplace_back(n, t);
      continue;
    }
    Tensor e(t.dtype(), t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (t.dtype() == DType::kF32) e.mutable_ptr<float>()[i] = it->second[i];
      else if (t.dtype() == DType::kBF16) e.mutable_ptr<uint16_t>()[i] = f32_to_bf16(it->second[i]);
      else ADD_FAILURE() << n << ": unexpected dtype";
    }
    ts.emplace_back(n, e);
  }
  write_safetensors(out + "/model.safetensors", ts, {{"format", "pt"}});
}

struct Ctx {
  ThreadPool pool{1};
  KernelTable kt = select_kernels("");
  OpContext ctx{&kt, &pool};
};

// max |logit diff| / max |logit| between the f32 forwards (f32 weights and KV) of checkpoints a and b over ids.
inline float f32_logit_gap(const std::string& a_dir, const std::string& b_dir, const std::vector<int32_t>& ids) {
  ModelOptions mo;
  mo.n_threads = 1;
  mo.weights = WeightFormat::kF32;
  auto a = Transformer::load(a_dir, mo), b = Transformer::load(b_dir, mo);
  KvCache ca = a->new_cache(64), cb = b->new_cache(64);
  std::vector<float> la, lb;
  a->forward(ids.data(), static_cast<int64_t>(ids.size()), ca, la, true);
  b->forward(ids.data(), static_cast<int64_t>(ids.size()), cb, lb, true);
  EXPECT_EQ(la.size(), lb.size());
  float diff = 0, mag = 0;
  for (size_t i = 0; i < la.size() && i < lb.size(); ++i)
    diff = std::max(diff, std::fabs(la[i] - lb[i])), mag = std::max(mag, std::fabs(la[i]));
  return diff / mag;
}

}  // namespace blockspec::smooth_test
