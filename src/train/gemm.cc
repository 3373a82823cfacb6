#include "train/gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"

namespace blockspec {

namespace {

// out[C, R] = conv(in[R, C]^T), in tiles of 32 x 32 that keep both sides in L1.
template <class Out, class Conv>
void transpose_as(const OpContext& c, const float* in, int64_t R, int64_t C, Out* out, Conv conv) {
  constexpr int64_t kT = 32;
  c.pool->parallel_for((C + kT - 1) / kT, [&](int64_t b0, int64_t b1) {
    for (int64_t c0 = b0 * kT; c0 < std::min(C, b1 * kT); c0 += kT)
      for (int64_t r0 = 0; r0 < R; r0 += kT)
        for (int64_t j = c0; j < std::min(C, c0 + kT); ++j)
          for (int64_t i = r0; i < std::min(R, r0 + kT); ++i) out[j * R + i] = conv(in[i * C + j]);
  });
}

// out[C, R] = bf16(in[R, C]^T): the transpose and the rounding in one pass.
void transpose_bf16(const OpContext& c, const float* in, int64_t R, int64_t C, uint16_t* out) {
  transpose_as(c, in, R, C, out, f32_to_bf16);
}

// out[i] = bf16(in[i])
void round_bf16(const OpContext& c, const float* in, int64_t n, uint16_t* out) {
  c.pool->parallel_for(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = f32_to_bf16(in[i]);
  });
}

// y[M, N] = xb[M, K] . wb[N, K]^T, both bf16, f32 sums (KernelTable::matmul_bf16_dp, or the bf16-weight kernel
// on xb widened where the CPU has no AVX-512 BF16: the same products, each exact in f32).
void gemm_bf16_both(const OpContext& c, const uint16_t* xb, const uint16_t* wb, int64_t M, int64_t K, int64_t N,
                    float* y) {
  if (M == 0 || N == 0) return;
  std::vector<float> xr;
  if (c.k->matmul_bf16_dp == nullptr) {
    xr.resize(M * K);
    for (int64_t i = 0; i < M * K; ++i) xr[i] = bf16_to_f32(xb[i]);
  }
  c.pool->parallel_for_grain(N, 16, [&](int64_t n0, int64_t n1) {
    if (c.k->matmul_bf16_dp != nullptr) c.k->matmul_bf16_dp(xb, wb, y, M, K, N, n0, n1);
    else c.k->matmul_bf16(xr.data(), wb, y, M, K, N, n0, n1);
  });
}

}  // namespace

void transpose(const OpContext& c, const float* in, int64_t R, int64_t C, float* out) {
  transpose_as(c, in, R, C, out, [](float v) { return v; });
}

void gemm_nt(const OpContext& c, const float* x, const float* w, int64_t M, int64_t K, int64_t N, float* y) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    std::fill(y, y + M * N, 0.f);
    return;
  }
  if (c.bf16_train_products) {
    std::vector<uint16_t> xb(M * K), wb(N * K);
    round_bf16(c, x, M * K, xb.data());
    round_bf16(c, w, N * K, wb.data());
    gemm_bf16_both(c, xb.data(), wb.data(), M, K, N, y);
    return;
  }
  c.pool->parallel_for_grain(N, 16, [&](int64_t n0, int64_t n1) { c.k->matmul_f32(x, w, y, M, K, N, n0, n1); });
}

void gemm_nt_bf16(const OpContext& c, const float* x, const uint16_t* w, int64_t M, int64_t K, int64_t N, float* y) {
  if (M == 0 || N == 0) return;
  std::vector<uint16_t> xb(M * K);
  round_bf16(c, x, M * K, xb.data());
  gemm_bf16_both(c, xb.data(), w, M, K, N, y);
}

void gemm_backward(const OpContext& c, const float* x, const float* w, const float* w_t, const float* dy, int64_t M,
                   int64_t K, int64_t N, float* dx, float* dw) {
  if (dx != nullptr && c.bf16_train_products) {  // the transposed weight rounded as it is made
    std::vector<uint16_t> dyb(M * N), wtb(K * N);
    round_bf16(c, dy, M * N, dyb.data());
    if (w_t != nullptr) round_bf16(c, w_t, K * N, wtb.data());
    else transpose_bf16(c, w, N, K, wtb.data());
    gemm_bf16_both(c, dyb.data(), wtb.data(), M, N, K, dx);
  } else if (dx != nullptr) {
    std::vector<float> own;
    if (w_t == nullptr) {
      own.resize(K * N);
      transpose(c, w, N, K, own.data());
      w_t = own.data();
    }
    gemm_nt(c, dy, w_t, M, N, K, dx);  // dx[M, K] = dy[M, N] . (w^T)[K, N]^T
  }
  if (dw != nullptr && M > 0) {
    std::vector<float> g(N * K);
    if (c.bf16_train_products) {  // the transposed operands rounded as they are made
      std::vector<uint16_t> dy_t(N * M), x_t(K * M);
      transpose_bf16(c, dy, M, N, dy_t.data());
      transpose_bf16(c, x, M, K, x_t.data());
      gemm_bf16_both(c, dy_t.data(), x_t.data(), N, M, K, g.data());
    } else {
      std::vector<float> dy_t(N * M), x_t(K * M);
      transpose(c, dy, M, N, dy_t.data());
      transpose(c, x, M, K, x_t.data());
      gemm_nt(c, dy_t.data(), x_t.data(), N, M, K, g.data());  // g[N, K] = (dy^T)[N, M] . (x^T)[K, M]^T
    }
    c.pool->parallel_for(N * K, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) dw[i] += g[i];
    });
  }
}

namespace {

// The rows of a weighted per-row loss, threaded over rows: correct[i] = (argmax z_i == label_i) for every row; a
// row of weight 0 gets dlogits 0 and no loss; fn(i, z, argmax, dz) returns the loss of each other row (dz nullptr
// without dlogits). Returns the sum in row order.
template <class Fn>
double weighted_rows(const OpContext& c, const float* logits, const int32_t* labels, const float* weight, int64_t n,
                     int64_t V, float* dlogits, uint8_t* correct, Fn fn, double* row_loss_out = nullptr) {
  std::vector<double> row_loss(n, 0.0);
  c.pool->parallel_for(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* z = logits + i * V;
      const int64_t am = std::max_element(z, z + V) - z;
      correct[i] = am == labels[i];
      float* dz = dlogits ? dlogits + i * V : nullptr;
      if (weight[i] == 0) {
        if (dz) std::fill(dz, dz + V, 0.f);
        continue;
      }
      row_loss[i] = fn(i, z, am, dz);
    }
  });
  double loss = 0;
  for (double l : row_loss) loss += l;
  if (row_loss_out) std::copy(row_loss.begin(), row_loss.end(), row_loss_out);
  return loss;
}

// log-sum-exp of a row whose maximum is mx: f32 exp, double sum.
double row_lse(const float* z, int64_t V, float mx) {
  double sum = 0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp(z[j] - mx);
  return mx + std::log(sum);
}

}  // namespace

double cross_entropy_rows(const OpContext& c, const float* logits, const int32_t* labels, const float* weight,
                          int64_t n, int64_t V, double denom, float* dlogits, uint8_t* correct, double* row_loss) {
  if (denom <= 0) fail("cross_entropy: the denominator must be > 0, found ", denom);
  for (int64_t i = 0; i < n; ++i)
    if (weight[i] != 0 && (labels[i] < 0 || labels[i] >= V))
      fail("cross_entropy: label ", labels[i], " of row ", i, " outside [0, ", V, ")");
  return weighted_rows(c, logits, labels, weight, n, V, dlogits, correct,
                       [&](int64_t i, const float* z, int64_t am, float* dz) {
    const double lse = row_lse(z, V, z[am]), cw = weight[i] / denom, loss = cw * (lse - z[labels[i]]);
    if (dz) {  // dz may alias z: read before written
      const float lse_f = static_cast<float>(lse), cf = static_cast<float>(cw);
      const float zl = z[labels[i]];
      for (int64_t j = 0; j < V; ++j) dz[j] = cf * std::exp(z[j] - lse_f);
      dz[labels[i]] = cf * std::exp(zl - lse_f) - cf;
    }
    return loss;
  }, row_loss);
}

double kl_rows(const OpContext& c, const float* logits, const float* teacher, const int32_t* labels, const float* weight,
               int64_t n, int64_t V, double denom, float* dlogits, uint8_t* correct) {
  if (denom <= 0) fail("kl: the denominator must be > 0, found ", denom);
  return weighted_rows(c, logits, labels, weight, n, V, dlogits, correct,
                       [&](int64_t i, const float* z, int64_t am, float* dz) {
    const float* t = teacher + i * V;
    const double lz = row_lse(z, V, z[am]), lt = row_lse(t, V, *std::max_element(t, t + V)), cw = weight[i] / denom;
    double kl = 0;
    for (int64_t j = 0; j < V; ++j) kl += std::exp(t[j] - lt) * ((t[j] - lt) - (z[j] - lz));
    if (dz) {  // dz may alias z: each element is read before it is written, after the loss
      const float lz_f = static_cast<float>(lz), lt_f = static_cast<float>(lt), cf = static_cast<float>(cw);
      for (int64_t j = 0; j < V; ++j) dz[j] = cf * (std::exp(z[j] - lz_f) - std::exp(t[j] - lt_f));
    }
    return cw * kl;
  });
}

namespace {
// rows [T, heads, hd] of head h -> [T, hd] contiguous
void head_rows(const float* x, int64_t T, int64_t heads, int64_t hd, int64_t h, float* out) {
  for (int64_t t = 0; t < T; ++t) std::copy_n(x + (t * heads + h) * hd, hd, out + t * hd);
}
void put_head_rows(const float* in, int64_t T, int64_t heads, int64_t hd, int64_t h, float* x, bool add) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < hd; ++d) {
      float& o = x[(t * heads + h) * hd + d];
      o = add ? o + in[t * hd + d] : in[t * hd + d];
    }
}
}  // namespace

void causal_attention_forward(const OpContext& c, const float* q, const float* k, const float* v, int64_t T,
                              int64_t n_heads, int64_t n_kv_heads, int64_t hd, float scale, float* out,
                              std::vector<float>& probs) {
  const int64_t group = n_heads / n_kv_heads;
  probs.assign(n_heads * T * T, 0.f);
  std::vector<float> qh(T * hd), kh(T * hd), vt(hd * T), vh(T * hd), oh(T * hd);
  for (int64_t h = 0; h < n_heads; ++h) {
    const int64_t g = h / group;
    if (h % group == 0) {
      head_rows(k, T, n_kv_heads, hd, g, kh.data());
      head_rows(v, T, n_kv_heads, hd, g, vh.data());
      transpose(c, vh.data(), T, hd, vt.data());
    }
    head_rows(q, T, n_heads, hd, h, qh.data());
    float* p = probs.data() + h * T * T;  // [T, T]
    gemm_nt(c, qh.data(), kh.data(), T, hd, T, p);
    c.pool->parallel_for(T, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        float* r = p + i * T;
        float mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, r[j] * scale);
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(static_cast<double>(r[j] * scale - mx));
        for (int64_t j = 0; j <= i; ++j) r[j] = static_cast<float>(std::exp(static_cast<double>(r[j] * scale - mx)) / sum);
        std::fill(r + i + 1, r + T, 0.f);
      }
    });
    gemm_nt(c, p, vt.data(), T, T, hd, oh.data());
    put_head_rows(oh.data(), T, n_heads, hd, h, out, false);
  }
}

void causal_attention_backward(const OpContext& c, const float* q, const float* k, const float* v, const float* out,
                               const std::vector<float>& probs, const float* dout, int64_t T, int64_t n_heads,
                               int64_t n_kv_heads, int64_t hd, float scale, float* dq, float* dk, float* dv) {
  const int64_t group = n_heads / n_kv_heads;
  std::fill(dk, dk + T * n_kv_heads * hd, 0.f);
  std::fill(dv, dv + T * n_kv_heads * hd, 0.f);
  std::vector<float> qt(hd * T), kh(T * hd), kt(hd * T), vh(T * hd), doh(T * hd), dot(hd * T), oh(T * hd);
  std::vector<float> dp(T * T), pt(T * T), dst(T * T), tmp(T * hd);
  for (int64_t h = 0; h < n_heads; ++h) {
    const int64_t g = h / group;
    if (h % group == 0) {
      head_rows(k, T, n_kv_heads, hd, g, kh.data());
      head_rows(v, T, n_kv_heads, hd, g, vh.data());
      transpose(c, kh.data(), T, hd, kt.data());
    }
    const float* p = probs.data() + h * T * T;
    head_rows(dout, T, n_heads, hd, h, doh.data());
    head_rows(out, T, n_heads, hd, h, oh.data());
    // dP = dO V^T;  dS = P (dP - rowsum(dO . O)) * scale
    gemm_nt(c, doh.data(), vh.data(), T, hd, T, dp.data());
    c.pool->parallel_for(T, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        double dd = 0;
        for (int64_t d = 0; d < hd; ++d) dd += static_cast<double>(doh[i * hd + d]) * oh[i * hd + d];
        for (int64_t j = 0; j < T; ++j)
          dp[i * T + j] = j <= i ? static_cast<float>(p[i * T + j] * (dp[i * T + j] - dd) * scale) : 0.f;
      }
    });
    // dQ = dS K
    gemm_nt(c, dp.data(), kt.data(), T, T, hd, tmp.data());
    put_head_rows(tmp.data(), T, n_heads, hd, h, dq, false);
    // dK += dS^T Q;  dV += P^T dO
    transpose(c, dp.data(), T, T, dst.data());
    head_rows(q, T, n_heads, hd, h, tmp.data());
    transpose(c, tmp.data(), T, hd, qt.data());
    gemm_nt(c, dst.data(), qt.data(), T, T, hd, tmp.data());
    put_head_rows(tmp.data(), T, n_kv_heads, hd, g, dk, true);
    transpose(c, p, T, T, pt.data());
    transpose(c, doh.data(), T, hd, dot.data());
    gemm_nt(c, pt.data(), dot.data(), T, T, hd, tmp.data());
    put_head_rows(tmp.data(), T, n_kv_heads, hd, g, dv, true);
  }
}

}  // namespace blockspec
