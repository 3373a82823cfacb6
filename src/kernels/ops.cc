#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "kernels/attention_common.h"

namespace blockspec {

void linear(const OpContext& ctx, const float* x, const Tensor& w, const float* bias, float* y, int64_t M) {
  BS_ASSERT(w.ndim() == 2);
  const int64_t N = w.dim(0), K = w.dim(1);
  std::vector<uint16_t> xb;  // [M, K] bf16 activations for matmul_bf16_dp
  const bool dp = ctx.bf16_activations && w.dtype() == DType::kBF16 && ctx.k->matmul_bf16_dp != nullptr;
  if (dp) {
    xb.resize(M * K);
    ctx.pool->parallel_for(M, [&](int64_t m0, int64_t m1) {
      for (int64_t i = m0 * K; i < m1 * K; ++i) xb[i] = f32_to_bf16(x[i]);
    });
  }
  // Rows of w split evenly between threads; a grain of 16 rows keeps each
  // thread's slice a contiguous stream of weight memory.
  auto body = [&](int64_t n0, int64_t n1) {
    if (dp) ctx.k->matmul_bf16_dp(xb.data(), w.ptr<uint16_t>(), y, M, K, N, n0, n1);
    else if (w.dtype() == DType::kF32) ctx.k->matmul_f32(x, w.ptr<float>(), y, M, K, N, n0, n1);
    else if (w.dtype() == DType::kBF16) ctx.k->matmul_bf16(x, w.ptr<uint16_t>(), y, M, K, N, n0, n1);
    else fail("linear: unsupported weight dtype ", dtype_name(w.dtype()));
    if (bias != nullptr)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = n0; n < n1; ++n) y[m * N + n] += bias[n];
  };
  ctx.pool->parallel_for_grain(N, 16, body);
}

void rmsnorm(const float* x, const float* w, float eps, int64_t rows, int64_t dim, float* out,
             bool round_bf16) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    float inv = 1.0f / std::sqrt(static_cast<float>(ss / dim) + eps);
    if (round_bf16) {
      for (int64_t i = 0; i < dim; ++i) o[i] = bf16_to_f32(f32_to_bf16(w[i] * bf16_to_f32(f32_to_bf16(xr[i] * inv))));
    } else {
      for (int64_t i = 0; i < dim; ++i) o[i] = w[i] * (xr[i] * inv);
    }
  }
}

void rope_neox(float* x, const int64_t* positions, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
               const float* inv_freq, int64_t rotary_dim, float scaling, bool round_bf16) {
  auto r = [round_bf16](float v) { return round_bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; };
  const int64_t half = rotary_dim / 2;
  std::vector<float> cs(half), sn(half);
  for (int64_t t = 0; t < n_tokens; ++t) {
    // freqs = position * inv_freq in float32, as transformers' rotary embedding.
    float pos = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      float f = pos * inv_freq[i];
      cs[i] = r(std::cos(f) * scaling);
      sn[i] = r(std::sin(f) * scaling);
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* xh = x + (t * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        float a = xh[i], b = xh[i + half];
        // q*cos + rotate_half(q)*sin, with rotate_half(q) = [-b, a]
        xh[i] = r(r(a * cs[i]) + r(-b * sn[i]));
        xh[i + half] = r(r(b * cs[i]) + r(a * sn[i]));
      }
    }
  }
}

void silu_mul(float* gate, const float* up, int64_t n, bool round_bf16) {
  swiglu_ref(gate, up, gate, n, round_bf16);
}

void swiglu_rows(const OpContext& ctx, const float* gu, int64_t rows, int64_t I, float* out, bool round_bf16) {
  // Items of up to 2048 values of one row, so a single decode row still
  // splits across threads.
  constexpr int64_t kPiece = 2048;
  const int64_t per_row = (I + kPiece - 1) / kPiece;
  ctx.pool->parallel_for(rows * per_row, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      const int64_t r = it / per_row, i0 = it % per_row * kPiece, n = std::min(kPiece, I - i0);
      ctx.k->swiglu(gu + r * 2 * I + i0, gu + r * 2 * I + I + i0, out + r * I + i0, n, round_bf16);
    }
  });
}

void round_to_bf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

namespace {

// Scores, softmax and weighted sum of values for query heads [h0, h1) of one
// token t, all reading the same KV head. Keys and values are walked row by
// row with the heads inner, so each K/V row is read from memory once per KV
// head instead of once per query head (6x less KV traffic for Qwen2.5-1.5B,
// 12 heads over 2 KV heads). Per head the operations and their order are the
// same as one head at a time, so results do not depend on the grouping.
void attend_heads(const OpContext& ctx, const float* q, const float* k, const float* v, const AttentionShape& s,
                  int64_t t, int64_t h0, int64_t h1, std::vector<float>& scores, float* out) {
  const int64_t D = s.head_dim, kvh = h0 / (s.n_heads / s.n_kv_heads);
  const int64_t kv_stride = s.n_kv_heads * D, n_h = h1 - h0;
  const int64_t n_ctx = s.start + t + 1;  // causal: keys 0..start+t
  scores.resize(n_h * n_ctx);             // [n_h, n_ctx]
  std::vector<float> mx(n_h, -INFINITY);
  for (int64_t j = 0; j < n_ctx; ++j) {
    const float* kr = k + j * kv_stride + kvh * D;
    for (int64_t i = 0; i < n_h; ++i) {
      float d = ctx.k->dot(q + (t * s.n_heads + h0 + i) * D, kr, D);
      d = attention_score(d, s);
      scores[i * n_ctx + j] = d;
      mx[i] = std::max(mx[i], d);
    }
  }
  softmax_rows(*ctx.k, scores.data(), mx.data(), n_h, n_ctx, s.round_bf16);
  for (int64_t i = 0; i < n_h; ++i) std::memset(out + (t * s.n_heads + h0 + i) * D, 0, D * sizeof(float));
  for (int64_t j = 0; j < n_ctx; ++j) {
    const float* vr = v + j * kv_stride + kvh * D;
    for (int64_t i = 0; i < n_h; ++i) ctx.k->axpy(scores[i * n_ctx + j], vr, out + (t * s.n_heads + h0 + i) * D, D);
  }
  if (s.round_bf16)
    for (int64_t i = 0; i < n_h; ++i) round_to_bf16(out + (t * s.n_heads + h0 + i) * D, D);
}

}  // namespace

void attention_causal(const OpContext& ctx, const float* q, const float* k, const float* v,
                      const AttentionShape& s, float* out) {
  const int64_t group = s.n_heads / s.n_kv_heads;
  // Work items are (token, KV head) when there are enough of them to keep
  // every thread busy; else (token, query head), giving up K/V sharing for
  // parallelism (e.g. one decode token of a model with one KV head).
  const bool by_kv = s.n_tokens * s.n_kv_heads >= ctx.pool->n_threads();
  const int64_t per_item = by_kv ? group : 1;
  const int64_t n_items = s.n_tokens * s.n_heads / per_item;
  ctx.pool->parallel_for_dynamic(n_items, [&](int64_t b, int64_t e) {
    std::vector<float> scores;  // [heads of the item, context]
    for (int64_t it = b; it < e; ++it) {
      const int64_t local = n_items - 1 - it;  // latest (longest) token first
      const int64_t t = local / (s.n_heads / per_item), h0 = local % (s.n_heads / per_item) * per_item;
      attend_heads(ctx, q, k, v, s, t, h0, h0 + per_item, scores, out);
    }
  });
}

void embedding_lookup(const Tensor& table, const int32_t* ids, int64_t n, float* out) {
  const int64_t V = table.dim(0), D = table.dim(1);
  for (int64_t t = 0; t < n; ++t) {
    if (ids[t] < 0 || ids[t] >= V) fail("token id ", ids[t], " is out of range for a vocabulary of ", V);
    float* o = out + t * D;
    const int64_t off = static_cast<int64_t>(ids[t]) * D;
    switch (table.dtype()) {
      case DType::kF32: std::memcpy(o, table.ptr<float>() + off, D * sizeof(float)); break;
      case DType::kBF16:
        for (int64_t i = 0; i < D; ++i) o[i] = bf16_to_f32(table.ptr<uint16_t>()[off + i]);
        break;
      case DType::kF16:
        for (int64_t i = 0; i < D; ++i) o[i] = f16_to_f32(table.ptr<uint16_t>()[off + i]);
        break;
      default: fail("embedding: unsupported dtype ", dtype_name(table.dtype()));
    }
  }
}

void grouped_dynamic_conv(const float* u, int64_t n, int64_t H, const float* base, const float* dyn, int64_t side,
                          int64_t kt, int64_t gs, float* out) {
  const int64_t G = H / gs;
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * H;
    std::fill(o, o + H, 0.f);
    for (int64_t j = 0; j < kt && j <= t; ++j) {
      const float* src = u + (t - j) * H;
      const float* d = dyn + t * 2 * kt * G + (side * kt + j) * G;
      const float* bj = base + j * H;
      for (int64_t c = 0; c < H; ++c) o[c] += bj[c] * src[c] + d[c / gs] * src[c];
    }
  }
}

}  // namespace blockspec
