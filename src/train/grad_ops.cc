#include "train/grad_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/ops.h"

namespace blockspec {

void linear_backward(const float* x, const float* w, const float* dy, int64_t M, int64_t K, int64_t N, float* dx,
                     float* dw, float* db, ThreadPool& pool) {
  if (dx)  // dx[m, :] = sum_n dy[m, n] w[n, :]
    pool.parallel_for(M, [&](int64_t m0, int64_t m1) {
      std::vector<double> acc(K);
      for (int64_t m = m0; m < m1; ++m) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t n = 0; n < N; ++n) {
          const double g = dy[m * N + n];
          if (g == 0) continue;
          const float* wr = w + n * K;
          for (int64_t j = 0; j < K; ++j) acc[j] += g * wr[j];
        }
        for (int64_t j = 0; j < K; ++j) dx[m * K + j] = static_cast<float>(acc[j]);
      }
    });
  if (dw == nullptr && db == nullptr) return;
  // dw[n, :] += sum_m dy[m, n] x[m, :]
  pool.parallel_for(N, [&](int64_t n0, int64_t n1) {
    std::vector<double> acc(K);
    for (int64_t n = n0; n < n1; ++n) {
      std::fill(acc.begin(), acc.end(), 0.0);
      double bsum = 0;
      for (int64_t m = 0; m < M; ++m) {
        const double g = dy[m * N + n];
        bsum += g;
        if (g == 0) continue;
        const float* xr = x + m * K;
        for (int64_t j = 0; j < K; ++j) acc[j] += g * xr[j];
      }
      if (dw)
        for (int64_t j = 0; j < K; ++j) dw[n * K + j] += static_cast<float>(acc[j]);
      if (db) db[n] += static_cast<float>(bsum);
    }
  });
}

void rmsnorm_backward(const float* x, const float* w, float eps, const float* dy, int64_t rows, int64_t dim,
                      float* dx, float* dw) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* g = dy + r * dim;
    double ss = 0;
    for (int64_t j = 0; j < dim; ++j) ss += static_cast<double>(xr[j]) * xr[j];
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    // y_j = x_j inv w_j;  dx_j = inv (w_j g_j) - inv^3 / dim * x_j * sum_k w_k g_k x_k
    double dot = 0;
    for (int64_t j = 0; j < dim; ++j) dot += static_cast<double>(w[j]) * g[j] * xr[j];
    const double c = inv * inv * inv * dot / dim;
    for (int64_t j = 0; j < dim; ++j) {
      dx[r * dim + j] = static_cast<float>(inv * w[j] * g[j] - c * xr[j]);
      if (dw) dw[j] += static_cast<float>(static_cast<double>(g[j]) * xr[j] * inv);
    }
  }
}

void swiglu_backward(const float* gu, const float* dout, int64_t rows, int64_t I, float* dgu) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < I; ++i) {
      const double g = gu[r * 2 * I + i], u = gu[r * 2 * I + I + i], d = dout[r * I + i];
      const double sig = 1.0 / (1.0 + std::exp(-g));
      dgu[r * 2 * I + i] = static_cast<float>(d * u * sig * (1.0 + g * (1.0 - sig)));  // d silu / dg
      dgu[r * 2 * I + I + i] = static_cast<float>(d * g * sig);
    }
}

void rope_neox_backward(float* dx, const int64_t* positions, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                        const float* inv_freq, int64_t rotary_dim, float scaling) {
  std::vector<int64_t> neg(positions, positions + n_tokens);
  for (int64_t& p : neg) p = -p;  // cos is even and sin odd: R(-a) = R(a)^T, scaled alike
  rope_neox(dx, neg.data(), n_tokens, n_heads, head_dim, inv_freq, rotary_dim, scaling);
}

void check_masked_spans(const int32_t* spans, const MaskedAttentionShape& s) {
  for (int64_t i = 0; i < s.nq; ++i) {
    const int32_t* sp = spans + 4 * i;
    if (sp[0] < 0 || sp[0] > sp[1] || sp[1] > s.nk || sp[2] < 0 || sp[2] > sp[3] || sp[3] > s.nk ||
        sp[1] - sp[0] + sp[3] - sp[2] == 0)
      fail("masked attention: query ", i, " has bad key spans [", sp[0], ", ", sp[1], ") [", sp[2], ", ", sp[3], ")");
  }
}

void masked_attention_forward(const float* q, const float* k, const float* v, const int32_t* spans,
                              const MaskedAttentionShape& s, float* out, std::vector<float>& probs,
                              ThreadPool& pool) {
  check_masked_spans(spans, s);
  const int64_t D = s.head_dim, H = s.n_heads, group = s.n_heads / s.n_kv_heads, kvs = s.n_kv_heads * D;
  probs.assign(s.nq * H * s.nk, 0.f);
  pool.parallel_for(s.nq * H, [&](int64_t b, int64_t e) {
    for (int64_t qi = b; qi < e; ++qi) {
      const int64_t i = qi / H, h = qi % H, g = h / group;
      const int32_t* sp = spans + 4 * i;
      const float* qv = q + qi * D;
      float* p = probs.data() + qi * s.nk;
      double mx = -INFINITY;
      for (int r = 0; r < 2; ++r)
        for (int32_t j = sp[2 * r]; j < sp[2 * r + 1]; ++j) {
          double d = 0;
          for (int64_t t = 0; t < D; ++t) d += static_cast<double>(qv[t]) * k[j * kvs + g * D + t];
          p[j] = static_cast<float>(d * s.scale);
          mx = std::max(mx, static_cast<double>(p[j]));
        }
      double sum = 0;
      for (int r = 0; r < 2; ++r)
        for (int32_t j = sp[2 * r]; j < sp[2 * r + 1]; ++j) sum += std::exp(p[j] - mx);
      std::vector<double> o(D, 0.0);
      for (int r = 0; r < 2; ++r)
        for (int32_t j = sp[2 * r]; j < sp[2 * r + 1]; ++j) {
          p[j] = static_cast<float>(std::exp(p[j] - mx) / sum);
          for (int64_t t = 0; t < D; ++t) o[t] += static_cast<double>(p[j]) * v[j * kvs + g * D + t];
        }
      for (int64_t t = 0; t < D; ++t) out[qi * D + t] = static_cast<float>(o[t]);
    }
  });
}

void masked_attention_backward(const float* q, const float* k, const float* v, const int32_t* spans,
                               const MaskedAttentionShape& s, const std::vector<float>& probs, const float* dout,
                               float* dq, float* dk, float* dv, ThreadPool& pool) {
  const int64_t D = s.head_dim, H = s.n_heads, group = s.n_heads / s.n_kv_heads, kvs = s.n_kv_heads * D;
  // One task per KV head: the dk / dv rows of KV head g only take the queries of its heads, so each task
  // accumulates them in the serial order (query row, then head) whatever the thread split.
  pool.parallel_for(s.n_kv_heads, [&](int64_t g0, int64_t g1) {
    std::vector<double> dp(s.nk), gq(D);
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t j = 0; j < s.nk; ++j)
        for (int64_t t = 0; t < D; ++t) dk[j * kvs + g * D + t] = 0.f, dv[j * kvs + g * D + t] = 0.f;
      for (int64_t i = 0; i < s.nq; ++i)
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const int64_t qi = i * H + h;
          const int32_t* sp = spans + 4 * i;
          const float* p = probs.data() + qi * s.nk;
          const float* go = dout + qi * D;
          // dv_j += p_j do;  dp_j = do . v_j;  ds_j = p_j (dp_j - sum_l p_l dp_l)
          double pdp = 0;
          for (int r = 0; r < 2; ++r)
            for (int32_t j = sp[2 * r]; j < sp[2 * r + 1]; ++j) {
              double d = 0;
              for (int64_t t = 0; t < D; ++t) {
                d += static_cast<double>(go[t]) * v[j * kvs + g * D + t];
                dv[j * kvs + g * D + t] += p[j] * go[t];
              }
              dp[j] = d;
              pdp += p[j] * d;
            }
          std::fill(gq.begin(), gq.end(), 0.0);
          for (int r = 0; r < 2; ++r)
            for (int32_t j = sp[2 * r]; j < sp[2 * r + 1]; ++j) {
              const double ds = p[j] * (dp[j] - pdp) * s.scale;
              for (int64_t t = 0; t < D; ++t) {
                gq[t] += ds * k[j * kvs + g * D + t];
                dk[j * kvs + g * D + t] += static_cast<float>(ds * q[qi * D + t]);
              }
            }
          for (int64_t t = 0; t < D; ++t) dq[qi * D + t] = static_cast<float>(gq[t]);
        }
    }
  });
}

double cross_entropy(const float* logits, const int32_t* labels, const float* weight, int64_t n, int64_t V,
                     double denom, float* dlogits) {
  if (denom <= 0) fail("cross_entropy: the denominator must be > 0, found ", denom);
  double loss = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* z = logits + i * V;
    float* dz = dlogits ? dlogits + i * V : nullptr;
    if (weight[i] == 0) {
      if (dz) std::fill(dz, dz + V, 0.f);
      continue;
    }
    if (labels[i] < 0 || labels[i] >= V) fail("cross_entropy: label ", labels[i], " of row ", i, " outside [0, ", V, ")");
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, static_cast<double>(z[j]));
    for (int64_t j = 0; j < V; ++j) sum += std::exp(z[j] - mx);
    const double lse = mx + std::log(sum), c = weight[i] / denom;
    loss += c * (lse - z[labels[i]]);
    if (dz) {
      for (int64_t j = 0; j < V; ++j) dz[j] = static_cast<float>(c * std::exp(z[j] - lse));
      dz[labels[i]] -= static_cast<float>(c);
    }
  }
  return loss;
}

void grouped_dynamic_conv_backward(const float* u, int64_t n, int64_t H, const float* base, const float* dyn,
                                   int64_t side, int64_t kt, int64_t gs, const float* dout, float* du, float* dbase,
                                   float* ddyn) {
  const int64_t G = H / gs;
  for (int64_t t = 0; t < n; ++t) {
    const float* g = dout + t * H;
    for (int64_t j = 0; j < kt && j <= t; ++j) {
      const float* src = u + (t - j) * H;
      float* dsrc = du + (t - j) * H;
      const int64_t at = t * 2 * kt * G + (side * kt + j) * G;
      const float* d = dyn + at;
      float* dd = ddyn + at;
      const float* bj = base + j * H;
      float* dbj = dbase + j * H;
      for (int64_t gi = 0; gi < G; ++gi) {
        double acc = 0;
        for (int64_t c = gi * gs; c < (gi + 1) * gs; ++c) {
          acc += static_cast<double>(g[c]) * src[c];
          dbj[c] += g[c] * src[c];
          dsrc[c] += (bj[c] + d[gi]) * g[c];
        }
        dd[gi] += static_cast<float>(acc);
      }
    }
  }
}

}  // namespace blockspec
