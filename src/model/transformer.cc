#include "model/transformer.h"

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/quant.h"
#include "kernels/quant_rows.h"
#include "model/decoder_layer.h"
#include "model/gdn_layer.h"

namespace blockspec {

Transformer::Transformer(const WeightSource& src, const ModelOptions& opts)
    : cfg_(src.config()), opts_(opts), kt_(select_kernels(opts.isa)), pool_(opts.n_threads),
      rope_(compute_rope(cfg_)) {
  if (cfg_.is_draft)
    fail(src.path(), ": is a ", cfg_.architecture, " drafter, not a target model; pass it as the \"model\" of "
         "--speculative-config");
  if (cfg_.is_hybrid() && opts.emulate_bf16_activations)
    fail(src.path(), ": --activations bf16 is not supported for hybrid (Gated DeltaNet) models yet; use f32 activations");
  OpContext ctx{&kt_, &pool_};
  w_ = load_weights(src, cfg_, WeightOptions{opts.weights, opts.progress}, ctx);
  if (opts.emulate_bf16_activations) {
    // HF running a model in bf16 holds norm vectors and biases in bf16 too.
    auto r = [](Tensor& t) {
      if (!t.empty()) round_to_bf16(t.mutable_ptr<float>(), t.numel());
    };
    r(w_.out_norm);
    for (auto& l : w_.layers)
      for (Tensor* t : {&l.attn_norm, &l.attn_qkv.bias, &l.attn_o_bias, &l.attn_q_norm, &l.attn_k_norm, &l.ffn_norm,
                        &l.ffn_gate_up.bias, &l.ffn_down_bias})
        r(*t);
  }
  if (opts.kv_cache_dtype) {
    kv_dtype_ = *opts.kv_cache_dtype;
  } else {  // auto: the model dtype when every matrix is bf16, else f32
    bool all_bf16 = w_.lm_head.format == WeightFormat::kBF16;
    for (const auto& l : w_.layers) {
      if (l.linear) {  // a Gated DeltaNet layer: its projections, then the MLP
        for (const QuantTensor& m : l.gdn.in.mats) all_bf16 &= m.format == WeightFormat::kBF16;
        all_bf16 &= l.gdn.out.format == WeightFormat::kBF16;
        for (const QuantTensor& m : l.ffn_gate_up.mats) all_bf16 &= m.format == WeightFormat::kBF16;
        all_bf16 &= l.ffn_down.format == WeightFormat::kBF16;
        continue;
      }
      for (const LinearGroup* g : {&l.attn_qkv, &l.ffn_gate_up})
        for (const QuantTensor& m : g->mats) all_bf16 &= m.format == WeightFormat::kBF16;
      all_bf16 &= l.attn_o.format == WeightFormat::kBF16 && l.ffn_down.format == WeightFormat::kBF16;
    }
    kv_dtype_ = all_bf16 ? KvDType::kBF16 : KvDType::kF32;
  }
}

std::unique_ptr<Transformer> Transformer::load(const std::string& path, const ModelOptions& opts) {
  auto src = open_weight_source(path);
  // The source (file mapping) is dropped after loading: converted weights are
  // owned, and zero-copy safetensors views keep their own mapping alive.
  return std::unique_ptr<Transformer>(new Transformer(*src, opts));
}

uint64_t Transformer::weight_bytes() const {
  uint64_t b = w_.lm_head.nbytes() + w_.out_norm.nbytes();
  for (const auto& l : w_.layers) b += l.nbytes();
  return b;
}

BandwidthResult Transformer::measure_read_bandwidth(size_t bytes, int repeats) {
  return blockspec::measure_read_bandwidth(pool_, kt_.read_stream, bytes, repeats);
}

std::vector<double> Transformer::thread_cpu_seconds() const {
  std::vector<double> out = {ThreadPool::this_thread_cpu_seconds()};
  for (double s : pool_.worker_cpu_seconds()) out.push_back(s);
  return out;
}

KvCache Transformer::new_cache(int64_t capacity) const { return new_cache(capacity, kv_dtype_); }

KvCache Transformer::new_cache(int64_t capacity, KvDType dtype) const {
  KvCache c(cfg_.n_attention_layers(), capacity, cfg_.n_kv_heads, cfg_.head_dim, dtype);
  if (!w_.kv_k_scale.empty()) c.set_layer_scales(w_.kv_k_scale, w_.kv_v_scale);
  if (cfg_.is_hybrid()) c.own_state(state_floats_per_sequence());
  return c;
}

int64_t Transformer::kv_bytes_per_token() const {
  return KvCache(cfg_.n_attention_layers(), 0, cfg_.n_kv_heads, cfg_.head_dim, kv_dtype_).bytes_per_token();
}

void Transformer::forward(const int32_t* tokens, int64_t n, KvCache& cache, std::vector<float>& logits,
                          bool all_logits) {
  forward_batch({SeqChunk{tokens, n, &cache, all_logits}}, logits);
}

void Transformer::forward_batch(const std::vector<SeqChunk>& chunks, std::vector<float>& logits) {
  const ModelConfig& c = cfg_;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  if (chunks.empty()) fail("forward: no sequences");
  int64_t n = 0;  // total tokens over all chunks
  std::vector<int32_t> ids;
  std::vector<int64_t> pos;  // [n] absolute position of each row
  for (const SeqChunk& ch : chunks) {
    if (ch.n <= 0) fail("forward: a sequence chunk has no tokens");
    const int64_t start = ch.cache->size();
    if (start + ch.n > ch.cache->capacity())
      fail("context length ", start + ch.n, " exceeds the KV cache capacity ", ch.cache->capacity());
    if (c.is_hybrid()) {
      if (ch.cache->state() == nullptr || ch.cache->state_floats() != state_floats_per_sequence())
        fail("forward: a hybrid model's sequence has no recurrent-state slot of ", state_floats_per_sequence(), " floats");
      if (ch.cache->state_tokens() != start)
        fail("forward: the recurrent state holds ", ch.cache->state_tokens(), " tokens but the KV cache ", start,
             " (a hybrid model's state cannot be cropped like its KV cache)");
    }
    ids.insert(ids.end(), ch.tokens, ch.tokens + ch.n);
    for (int64_t t = 0; t < ch.n; ++t) pos.push_back(start + t);
    n += ch.n;
  }
  OpContext ctx = op_context();
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t T = static_cast<int64_t>(tap_layers_.size());
  for (const SeqChunk& ch : chunks)
    if (ch.taps != nullptr) ch.taps->assign(ch.n * T * H, 0.f);
  // Copies rows of x after layer li into the tap slots of every chunk that
  // wants them. The last layer's tap is the final-normed state, as HF's
  // hidden_states[n_layers] is (dflash.md §1.3); scratch: [n, H].
  auto capture_taps = [&](const std::vector<SeqChunk>& chs, int64_t li, const float* xs, float* scratch) {
    for (int64_t ti = 0; ti < T; ++ti) {
      if (tap_layers_[ti] != li) continue;
      int64_t row = 0;
      for (const SeqChunk& ch : chs) {
        if (ch.taps != nullptr) {
          const float* src = xs + row * H;
          if (li == c.n_layers - 1) {
            rmsnorm(src, w_.out_norm.ptr<float>(), eps, ch.n, H, scratch, opts_.emulate_bf16_activations);
            src = scratch;
          }
          for (int64_t t = 0; t < ch.n; ++t)
            std::copy(src + t * H, src + (t + 1) * H, ch.taps->data() + (t * T + ti) * H);
        }
        row += ch.n;
      }
    }
  };

  std::vector<float> x(n * H);  // [n, H] residual stream
  LayerScratch ls;
  const bool bf = opts_.emulate_bf16_activations;
  dequantize_rows(w_.tok_embd, ids.data(), n, x.data());
  if (bf) round_to_bf16(x.data(), n * H);
  std::vector<LayerSeq> seqs;
  for (const SeqChunk& ch : chunks) seqs.push_back({ch.cache, ch.n});
  std::vector<GdnSeq> gseqs(chunks.size());
  const int64_t per_layer = c.gdn.state_floats();
  if (c.is_hybrid())
    for (const SeqChunk& ch : chunks) {
      KvCache::StateLog& log = ch.cache->state_log();
      log.start = ch.verify ? ch.cache->size() : -1, log.n = ch.verify ? ch.n : 0;
      if (ch.verify) log.data.resize(c.n_linear_layers() * gdn_log_floats(c, ch.n));
    }
  for (int64_t li = 0, lin = 0; li < c.n_layers; ++li) {
    if (c.is_linear(li)) {
      for (size_t i = 0; i < chunks.size(); ++i) {
        KvCache::StateLog& log = chunks[i].cache->state_log();
        gseqs[i] = {chunks[i].cache->state() + lin * per_layer, chunks[i].n,
                    log.start >= 0 ? log.data.data() + lin * gdn_log_floats(c, chunks[i].n) : nullptr};
      }
      gdn_layer(ctx, c, w_.layers[li], gseqs, x.data(), ls, nullptr, opts_.gdn_chunked_prefill);
      ++lin;
    } else {
      decoder_layer(ctx, c, rope_, w_.layers[li], c.is_hybrid() ? c.kv_layer(li) : li, seqs, pos.data(), x.data(), ls,
                    bf);
    }
    capture_taps(chunks, li, x.data(), ls.xn.data());
  }
  std::vector<float>& xn = ls.xn;  // [n, H]
  auto rnd = [bf](std::vector<float>& v) {
    if (bf) round_to_bf16(v.data(), static_cast<int64_t>(v.size()));
  };

  // Rows that need logits: every row of all_logits chunks, else the last.
  std::vector<int64_t> out_rows;
  int64_t row = 0;
  for (const SeqChunk& ch : chunks) {
    ch.cache->set_size(ch.cache->size() + ch.n);
    if (c.is_hybrid()) ch.cache->set_state_tokens(ch.cache->size());
    if (ch.all_logits) {
      for (int64_t t = 0; t < ch.n; ++t) out_rows.push_back(row + t);
    } else {
      out_rows.push_back(row + ch.n - 1);
    }
    row += ch.n;
  }
  const int64_t n_out = static_cast<int64_t>(out_rows.size());
  for (int64_t r = 0; r < n_out; ++r)
    rmsnorm(x.data() + out_rows[r] * H, w_.out_norm.ptr<float>(), eps, 1, H, xn.data() + r * H, bf);
  logits.resize(n_out * V);
  linear(ctx, xn.data(), w_.lm_head, nullptr, logits.data(), n_out);
  rnd(logits);
}

void Transformer::commit(KvCache& cache, int64_t size) {
  if (!cfg_.is_hybrid() || size == cache.size()) {
    cache.set_size(size);
    return;
  }
  KvCache::StateLog& log = cache.state_log();
  const int64_t keep = size - log.start;
  if (log.start < 0 || cache.state_tokens() != log.start + log.n || keep < 0 || keep > log.n)
    fail("commit: the recurrent state can only be rolled back into the tokens of its last verify forward (cache at ",
         cache.size(), ", asked ", size, ")");
  OpContext ctx = op_context();
  const int64_t per_layer = cfg_.gdn.state_floats(), per_log = gdn_log_floats(cfg_, log.n);
  for (int64_t lin = 0; lin < cfg_.n_linear_layers(); ++lin)
    gdn_rollback(ctx, cfg_, log.data.data() + lin * per_log, log.n, keep, cache.state() + lin * per_layer);
  cache.set_size(size);
  cache.set_state_tokens(size);
  log.start = -1, log.n = 0;
}

void Transformer::set_tap_layers(const std::vector<int64_t>& layers) {
  for (int64_t t : layers)
    if (t < 0 || t >= cfg_.n_layers)
      fail("tap layer ", t, " is not a layer of this model (it has ", cfg_.n_layers, " layers)");
  tap_layers_ = layers;
}

void Transformer::prefill(const int32_t* tokens, int64_t n, KvCache& cache, std::vector<float>& logits,
                          bool all_logits, std::vector<float>* taps) {
  const int64_t chunk = std::max<int64_t>(1, opts_.prefill_chunk);
  std::vector<float> part, part_taps;
  if (all_logits) logits.clear();
  if (taps != nullptr) taps->clear();
  for (int64_t b = 0; b < n; b += chunk) {
    int64_t m = std::min(chunk, n - b);
    forward_batch({SeqChunk{tokens + b, m, &cache, all_logits, taps ? &part_taps : nullptr}}, part);
    if (taps != nullptr) taps->insert(taps->end(), part_taps.begin(), part_taps.end());
    if (all_logits) logits.insert(logits.end(), part.begin(), part.end());
    else if (b + m == n) logits = part;
  }
}

}  // namespace blockspec
