#include "train/draft_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "formats/safetensors.h"
#include "model/weight_source.h"
#include "tensor/tensor.h"

namespace blockspec {

namespace {

namespace fs = std::filesystem;

// Checkpoint shape of a DraftParams tensor: [rows, input width] for
// matrices, [n] for norms.
Shape shape_of(const std::string& name, const DraftShape& s, int64_t numel) {
  if (name.find("norm") != std::string::npos) return {numel};
  if (name.find("base_kernel") != std::string::npos) return {2, s.conv_kernel, s.H};
  if (name.find("codebook") != std::string::npos) return {s.V, s.selector_rank};
  const int64_t cols = name == "fc.weight"                              ? s.tap_width
                       : name.find("o_proj") != std::string::npos    ? s.n_heads * s.head_dim
                       : name.find("down_proj") != std::string::npos ? s.F
                                                                     : s.H;
  return {numel / cols, cols};
}

Tensor to_tensor(const float* v, const Shape& shape, DType dtype) {
  Tensor t(dtype, shape);
  const int64_t n = shape_numel(shape);
  if (dtype == DType::kF32) std::copy(v, v + n, t.mutable_ptr<float>());
  else if (dtype == DType::kBF16)
    for (int64_t i = 0; i < n; ++i) t.mutable_ptr<uint16_t>()[i] = f32_to_bf16(v[i]);
  else fail("write_draft_checkpoint: dtype ", dtype_name(dtype), " (use bf16 or f32)");
  return t;
}

void copy_from(const Tensor& t, const std::string& what, float* out, int64_t n) {
  if (t.numel() != n) fail(what, ": ", t.numel(), " values, expected ", n);
  if (t.dtype() == DType::kF32) std::copy(t.ptr<float>(), t.ptr<float>() + n, out);
  else if (t.dtype() == DType::kBF16)
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(t.ptr<uint16_t>()[i]);
  else if (t.dtype() == DType::kF16)
    for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(t.ptr<uint16_t>()[i]);
  else fail(what, ": dtype ", dtype_name(t.dtype()), " (expected f32, bf16 or f16)");
}

}  // namespace

void write_draft_checkpoint(const std::string& dir, const DraftShape& s, DraftParams& p, const DraftArch& a,
                            DType dtype) {
  fs::create_directories(dir);
  nlohmann::ordered_json j;
  const bool d2 = s.dflash2();
  j["architectures"] = {d2 ? "DFlash2DraftModel" : "DFlashDraftModel"};
  j["model_type"] = "qwen3";
  j["hidden_size"] = s.H;
  j["num_attention_heads"] = s.n_heads;
  j["num_key_value_heads"] = s.n_kv_heads;
  j["head_dim"] = s.head_dim;
  j["intermediate_size"] = s.F;
  j["num_hidden_layers"] = s.n_layers;
  j["layer_types"] = std::vector<std::string>(s.n_layers, d2 ? "sliding_attention" : "full_attention");
  if (d2) {
    j["sliding_window"] = a.sliding_window;
    j["use_sliding_window"] = true;
    j["max_window_layers"] = 0;
    j["is_causal"] = false;
  }
  j["rms_norm_eps"] = s.eps;
  j["rope_theta"] = a.rope_theta;
  j["max_position_embeddings"] = a.max_position_embeddings;
  j["vocab_size"] = a.target_vocab_size;
  j["attention_bias"] = false;
  j["tie_word_embeddings"] = false;
  j["hidden_act"] = "silu";
  j["torch_dtype"] = dtype == DType::kBF16 ? "bfloat16" : "float32";
  j["block_size"] = a.block_size;
  j["num_target_layers"] = a.num_target_layers;
  const int64_t Vd = static_cast<int64_t>(a.draft_vocab.size());
  if (Vd > 0) j["draft_vocab_size"] = Vd;
  j["dflash_config"] = {{"mask_token_id", a.mask_token_id}, {"target_layer_ids", a.target_layer_ids}};
  if (a.causal) {
    if (d2) fail("write_draft_checkpoint: a DFlash2 drafter is bidirectional in the block");
    j["is_causal"] = true;
    j["dflash_config"]["causal"] = true;  // vLLM's key
  }
  if (d2) {
    if (Vd > 0) fail("write_draft_checkpoint: a DFlash2 drafter drafts over the full vocabulary");
    j["dflash_config"]["block_size"] = a.block_size;
    j["dflash_config"]["conv_kernel_size"] = s.conv_kernel;
    j["dflash_config"]["conv_group_size"] = s.conv_group;
    j["dflash_config"]["selector_rank"] = s.selector_rank;
    j["dflash_config"]["selector_top_k"] = s.selector_top_k;
  }
  j["blockspec_trained"] = {{"target_model_type", a.target_model_type}};
  {
    std::ofstream f(fs::path(dir) / "config.json");
    f << j.dump(2) << "\n";
    if (!f) fail(dir, "/config.json: write failed");
  }
  std::vector<std::pair<std::string, Tensor>> tensors;
  p.each([&](const std::string& n, std::vector<float>& v) {
    const int64_t numel = static_cast<int64_t>(v.size());
    if (const size_t at = n.find("gate_up_proj"); at != std::string::npos) {  // stored apart
      const std::string pre = n.substr(0, at);
      tensors.push_back({pre + "gate_proj.weight", to_tensor(v.data(), {s.F, s.H}, dtype)});
      tensors.push_back({pre + "up_proj.weight", to_tensor(v.data() + numel / 2, {s.F, s.H}, dtype)});
    } else {
      tensors.push_back({n, to_tensor(v.data(), shape_of(n, s, numel), dtype)});
    }
  });
  if (Vd > 0) {
    if (a.head == nullptr) fail("write_draft_checkpoint: a reduced vocabulary needs its head rows");
    tensors.push_back({"lm_head.weight", to_tensor(a.head, {Vd, s.H}, dtype)});
    Tensor d2t(DType::kI64, {Vd}), t2d(DType::kBool, {a.target_vocab_size});
    std::fill(t2d.mutable_ptr<uint8_t>(), t2d.mutable_ptr<uint8_t>() + a.target_vocab_size, 0);
    for (int64_t i = 0; i < Vd; ++i) {
      d2t.mutable_ptr<int64_t>()[i] = a.draft_vocab[i] - i;  // offsets: target id = i + d2t[i]
      t2d.mutable_ptr<uint8_t>()[a.draft_vocab[i]] = 1;
    }
    tensors.push_back({"d2t", d2t});
    tensors.push_back({"t2d", t2d});
  }
  const std::string tmp = (fs::path(dir) / "model.safetensors.tmp").string();
  write_safetensors(tmp, tensors, {{"format", "pt"}});
  fs::rename(tmp, fs::path(dir) / "model.safetensors");
}

void read_draft_params(const std::string& dir, const DraftShape& s, DraftParams& p) {
  (void)s;
  // Through the loader's weight source, so a quantized drafter (`blockspec quantize`: W8A8, W8A16, W4A16, FP8 ...)
  // starts training from its exact dequantization as well as a bf16 / f32 one.
  const std::unique_ptr<WeightSource> src = open_weight_source(dir);
  const auto load = [&](const std::string& name, float* out, int64_t n) {
    if (!src->has(name)) fail(dir, ": the drafter has no ", name, " (another architecture?)");
    copy_from(src->load(name), dir + ": " + name, out, n);
  };
  p.each([&](const std::string& n, std::vector<float>& v) {
    const int64_t numel = static_cast<int64_t>(v.size());
    if (const size_t at = n.find("gate_up_proj"); at != std::string::npos) {
      const std::string pre = n.substr(0, at);
      load(pre + "gate_proj.weight", v.data(), numel / 2);
      load(pre + "up_proj.weight", v.data() + numel / 2, numel / 2);
    } else {
      load(n, v.data(), numel);
    }
  });
}

void save_train_state(const std::string& path, DraftParams& p, std::vector<AdamW>& opt, int64_t step) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  size_t i = 0;
  p.each([&](const std::string& n, std::vector<float>& v) {
    const int64_t numel = static_cast<int64_t>(v.size());
    tensors.push_back({n, to_tensor(v.data(), {numel}, DType::kF32)});
    for (const char* which : {"m", "v"}) {
      const std::vector<double>& src = which[0] == 'm' ? opt.at(i).m() : opt.at(i).v();
      Tensor t(DType::kF64, {numel});
      std::copy(src.begin(), src.end(), t.mutable_ptr<double>());
      tensors.push_back({std::string("adamw.") + which + "." + n, t});
    }
    ++i;
  });
  const std::string tmp = path + ".tmp";
  write_safetensors(tmp, tensors, {{"step", std::to_string(step)}});
  fs::rename(tmp, path);
}

int64_t load_train_state(const std::string& path, DraftParams& p, std::vector<AdamW>& opt) {
  SafetensorsFile f(path);
  size_t i = 0;
  p.each([&](const std::string& n, std::vector<float>& v) {
    const int64_t numel = static_cast<int64_t>(v.size());
    copy_from(f.tensor(n), path + ": " + n, v.data(), numel);
    for (const char* which : {"m", "v"}) {
      const Tensor t = f.tensor(std::string("adamw.") + which + "." + n);
      if (t.dtype() != DType::kF64 || t.numel() != numel) fail(path, ": adamw.", which, ".", n, " has the wrong shape");
      std::vector<double>& dst = which[0] == 'm' ? opt.at(i).m() : opt.at(i).v();
      std::copy(t.ptr<double>(), t.ptr<double>() + numel, dst.begin());
    }
    ++i;
  });
  const auto it = f.metadata().find("step");
  if (it == f.metadata().end()) fail(path, ": no step in the metadata");
  return std::stoll(it->second);
}

}  // namespace blockspec
