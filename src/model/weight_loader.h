// Loads named tensors of a WeightSource into compute formats, validating
// presence and shape (each error names the file, tensor, expected vs found)
// and showing a progress bar on a TTY. Shared by the target (weights.cc) and
// the DFlash drafter (dflash_weights.cc), so a drafter's linear layers load
// in every format a target's do.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "kernels/block_quant.h"
#include "kernels/quant.h"
#include "kernels/quant_import.h"
#include "model/weights.h"

namespace blockspec {

struct WeightLoader {
  const WeightSource& src;
  const WeightOptions& opts;
  const OpContext& ctx;
  std::map<std::string, int> formats_used;
  int64_t done = 0, total = 0;
  bool tty = false;

  void check(const std::string& name, const Shape& shape) const {
    if (!src.has(name))
      fail(src.path(), ": missing tensor \"", name, "\" (expected shape ", shape_str(shape), ")");
    Shape s = src.shape(name);
    if (s != shape)
      fail(src.path(), ": tensor \"", name, "\" has shape ", shape_str(s), ", expected ", shape_str(shape),
           " from the model config");
  }
  void tick() {
    ++done;
    if (tty) {
      int w = 40, f = static_cast<int>(w * std::min(done, total) / std::max<int64_t>(total, 1));
      std::fprintf(stderr, "\rloading [%.*s%*s] %lld/%lld", f, "########################################", w - f, "",
                   static_cast<long long>(done), static_cast<long long>(total));
      if (done == total) std::fprintf(stderr, "\n");
    }
  }
  // Stored integer codes (GPTQ, compressed-tensors) are packed as they are,
  // never re-quantized, unless opts.format asks for another format: then the
  // source dequantizes them exactly (float(code) * scale) and they convert
  // like any dense weight.
  bool native(const std::string& name) const {
    return src.has_native(name) && (!opts.format || *opts.format == src.natural_format(name));
  }
  // Stored FP8 / NVFP4 / MXFP4 codes likewise load as they are (weight-only, compressed in memory).
  bool fp_native(const std::string& name) const {
    return src.has_fp_native(name) && (!opts.format || *opts.format == src.natural_format(name));
  }
  // GGUF blocks likewise load as stored (kernels/block_quant.h; every ISA has a block GEMM) unless opts.format
  // asks for another format.
  bool block_native(const std::string& name) const {
    return src.has_blocks(name) && (!opts.format || *opts.format == src.natural_format(name));
  }
  WeightFormat format_of(const std::string& name) const { return opts.format ? *opts.format : src.natural_format(name); }
  QuantTensor matrix(const std::string& name, const Shape& shape) {
    check(name, shape);
    const WeightFormat f = format_of(name);
    if (block_native(name)) {
      QuantTensor q = make_block_weight(ctx, f, shape[0], shape[1], [&](int64_t r0, int64_t r1, QBlock* out) {
        src.load_blocks(name, r0, r1, out);
      });
      src.release(name);
      formats_used[weight_format_name(f)]++;
      tick();
      return q;
    }
    if (fp_native(name)) {
      QuantTensor q = src.fp_native(name);
      src.release(name);
      formats_used[weight_format_name(f)]++;
      tick();
      return q;
    }
    // Large matrices (embeddings, lm_head, MLP) convert in row chunks so they
    // never exist whole in f32 next to their converted copy.
    constexpr int64_t kStreamElems = int64_t(4) << 20;
    const bool nat = native(name);
    QuantTensor q = nat ? make_weight_from_codes(ctx, shape[0], shape[1], f,
                                                 [&](int64_t r0, int64_t r1, int8_t* c, float* s) {
                                                   src.load_native(name, r0, r1, c, s);
                                                 })
                    : shape[0] * shape[1] > kStreamElems
                        ? make_weight_streamed(ctx, shape[0], shape[1], f,
                                               [&](int64_t r0, int64_t r1, float* out) {
                                                 src.load_rows(name, r0, r1, out);
                                               })
                        : make_weight(ctx, src.load(name), f);
    // Stored codes run as the checkpoint does (weight-only unless it quantizes activations);
    // conversions (--weights q8 / q4 of other formats) keep make_weight's default, W8A8 / W4A8.
    if (nat) q.act_int8 = q.act_per_token = src.native_act_int8(name);
    src.release(name);
    formats_used[weight_format_name(f)]++;
    tick();
    return q;
  }
  // Rows [r0, r1) of a fused group: fn(part i, its rows [b, e), offset of part row b from r0) for each part
  // they overlap (row r of the fused matrix comes from the part whose range holds r).
  template <class Fn>
  static void for_parts(const LinearGroup& g, int64_t r0, int64_t r1, Fn fn) {
    int64_t base = 0;
    for (size_t i = 0; i < g.part_rows.size(); ++i) {
      const int64_t b = std::max(r0, base), e = std::min(r1, base + g.part_rows[i]);
      if (b < e) fn(i, b - base, e - base, b - r0);
      base += g.part_rows[i];
    }
  }
  // Parts loaded as one matrix when they resolve to the same format.
  LinearGroup group(const std::vector<std::pair<std::string, Shape>>& parts, const std::vector<std::string>& biases) {
    LinearGroup g;
    std::vector<WeightFormat> fmts;
    int n_native = 0, n_act_int8 = 0, n_fp = 0, n_blocks = 0;
    for (const auto& [name, shape] : parts) {
      check(name, shape);
      fmts.push_back(format_of(name));
      n_native += native(name) ? 1 : 0;
      n_act_int8 += native(name) && src.native_act_int8(name) ? 1 : 0;
      n_fp += fp_native(name) ? 1 : 0;
      n_blocks += block_native(name) ? 1 : 0;
      g.part_rows.push_back(shape[0]);
      g.rows += shape[0];
    }
    const int64_t K = parts[0].second[1];
    const bool same = std::all_of(fmts.begin(), fmts.end(), [&](WeightFormat f) { return f == fmts[0]; });
    const int n_parts = static_cast<int>(parts.size());
    if (same && n_blocks == n_parts) {
      // GGUF blocks of one format, fused.
      const int64_t nb = K / block_spec(fmts[0]).block;
      auto rows = [&](int64_t r0, int64_t r1, QBlock* out) {
        for_parts(g, r0, r1, [&](size_t i, int64_t b, int64_t e, int64_t off) {
          src.load_blocks(parts[i].first, b, e, out + off * nb);
        });
      };
      g.mats.push_back(make_block_weight(ctx, fmts[0], g.rows, K, rows));
      formats_used[weight_format_name(fmts[0])] += static_cast<int>(parts.size());
      for (const auto& p : parts) {
        src.release(p.first);
        tick();
      }
    } else if (same && n_native == n_parts && (n_act_int8 == 0 || n_act_int8 == n_parts)) {
      // All parts stored as codes of one format and activation mode: fuse their codes.
      const int64_t G = (K + 127) / 128;  // scale groups of 128 inputs
      auto rows = [&](int64_t r0, int64_t r1, int8_t* c, float* s) {
        for_parts(g, r0, r1, [&](size_t i, int64_t b, int64_t e, int64_t off) {
          src.load_native(parts[i].first, b, e, c + off * K, s + off * G);
        });
      };
      g.mats.push_back(make_weight_from_codes(ctx, g.rows, K, fmts[0], rows));
      g.mats.back().act_int8 = g.mats.back().act_per_token = n_act_int8 > 0;
      formats_used[weight_format_name(fmts[0])] += static_cast<int>(parts.size());
      for (const auto& p : parts) {
        src.release(p.first);
        tick();
      }
    } else if (same && n_native == 0 && n_fp == 0 && n_blocks == 0) {
      auto rows = [&](int64_t r0, int64_t r1, float* out) {
        for_parts(g, r0, r1, [&](size_t i, int64_t b, int64_t e, int64_t off) {
          src.load_rows(parts[i].first, b, e, out + off * K);
        });
      };
      g.mats.push_back(make_weight_streamed(ctx, g.rows, K, fmts[0], rows));
      formats_used[weight_format_name(fmts[0])] += static_cast<int>(parts.size());
      for (const auto& p : parts) {
        src.release(p.first);
        tick();
      }
    } else {
      for (const auto& [name, shape] : parts) g.mats.push_back(matrix(name, shape));
      // Stored FP parts of one format (and, for NVFP4, one global scale) stack into one matrix exactly.
      if (g.mats.size() > 1 && std::all_of(parts.begin(), parts.end(), [&](const auto& p) { return fp_native(p.first); }))
        if (QuantTensor f = concat_fp_rows(g.mats); !f.empty()) g.mats = {std::move(f)};
    }
    if (!biases.empty()) {
      g.bias = Tensor(DType::kF32, {g.rows});
      int64_t off = 0;
      for (size_t i = 0; i < parts.size(); ++i) {
        Tensor b = vec(biases[i], g.part_rows[i]);
        std::copy(b.ptr<float>(), b.ptr<float>() + g.part_rows[i], g.bias.mutable_ptr<float>() + off);
        off += g.part_rows[i];
      }
    }
    return g;
  }
  // Any dense tensor (e.g. a conv kernel [2, kt, H]) as f32.
  Tensor dense(const std::string& name, const Shape& shape) {
    check(name, shape);
    Tensor t = to_f32(src.load(name));
    src.release(name);
    tick();
    return t;
  }
  Tensor vec(const std::string& name, int64_t n) {
    check(name, {n});
    Tensor t = to_f32(src.load(name));
    src.release(name);
    tick();
    return t;
  }
};

// Which of a dense decoder layer's optional tensors it has, and its shapes.
// Target: from its HF config. DFlash drafter: attention_bias covers q/k/v
// and o, q/k norms always, no MLP bias.
struct LayerSpec {
  int64_t hidden, q_rows, kv_rows, head_dim, intermediate;  // q_rows = heads * head_dim
  bool qkv_bias, o_bias, qk_norm, mlp_bias;
  int64_t n_tensors() const { return 9 + (qkv_bias ? 3 : 0) + (o_bias ? 1 : 0) + (qk_norm ? 2 : 0) + (mlp_bias ? 3 : 0); }
};

// One decoder layer's tensors under `prefix` (hf::target_layer / hf::draft_layer), by the names of hf_names.h.
LayerWeights load_layer(WeightLoader& L, const std::string& prefix, const LayerSpec& s);

}  // namespace blockspec
