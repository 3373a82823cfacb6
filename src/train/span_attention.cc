#include "train/span_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"

namespace blockspec {

namespace {

constexpr int64_t kMaxRunRows = 32;  // query rows per run (bounds the scratch: R = rows * group)

// Runs of consecutive query rows with identical spans: [start, end) pairs, and the probability offset of every
// row (compact layout, span_attention.h).
struct Runs {
  std::vector<int64_t> start, off;  // start: run starts then nq; off: [nq + 1]
};

Runs make_runs(const int32_t* spans, const MaskedAttentionShape& s) {
  check_masked_spans(spans, s);
  Runs r;
  r.off.assign(s.nq + 1, 0);
  for (int64_t i = 0; i < s.nq; ++i) {
    const int32_t* sp = spans + 4 * i;
    r.off[i + 1] = r.off[i] + s.n_heads * (sp[1] - sp[0] + sp[3] - sp[2]);
    if (i == 0 || i - r.start.back() >= kMaxRunRows || !std::equal(sp, sp + 4, spans + 4 * (i - 1)))
      r.start.push_back(i);
  }
  r.start.push_back(s.nq);
  return r;
}

// The key indices of a span pair, context span first.
std::vector<int32_t> span_keys(const int32_t* sp) {
  std::vector<int32_t> keys;
  for (int r = 0; r < 2; ++r)
    for (int32_t j = sp[2 * r]; j < sp[2 * r + 1]; ++j) keys.push_back(j);
  return keys;
}

// rows of KV head g of x [nk, n_kv, D] at keys -> out [n, D]; transposed: out [D, n]
void gather_rows(const float* x, const std::vector<int32_t>& keys, int64_t nkv, int64_t D, int64_t g, float* out) {
  for (size_t j = 0; j < keys.size(); ++j) std::memcpy(out + j * D, x + (keys[j] * nkv + g) * D, D * sizeof(float));
}
void gather_cols(const float* x, const std::vector<int32_t>& keys, int64_t nkv, int64_t D, int64_t g, float* out) {
  const int64_t n = static_cast<int64_t>(keys.size());
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < D; ++d) out[d * n + j] = x[(keys[j] * nkv + g) * D + d];
}
// out[C, R] = in[R, C]^T
void transpose_small(const float* in, int64_t R, int64_t C, float* out) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) out[c * R + r] = in[r * C + c];
}

// Query vectors of a run, KV head g: rows (ii, hh) = x[((i0 + ii) * H + g * group + hh) * D], ii-major: [R, D].
// The heads of one KV head are adjacent in x, so each query row is one copy.
void gather_queries(const float* x, int64_t i0, int64_t rows, int64_t H, int64_t group, int64_t D, int64_t g,
                    float* out) {
  for (int64_t ii = 0; ii < rows; ++ii)
    std::memcpy(out + ii * group * D, x + ((i0 + ii) * H + g * group) * D, group * D * sizeof(float));
}
void scatter_queries(const float* in, int64_t i0, int64_t rows, int64_t H, int64_t group, int64_t D, int64_t g,
                     float* x) {
  for (int64_t ii = 0; ii < rows; ++ii)
    std::memcpy(x + ((i0 + ii) * H + g * group) * D, in + ii * group * D, group * D * sizeof(float));
}

}  // namespace

void span_attention_forward(const OpContext& c, const float* q, const float* k, const float* v, const int32_t* spans,
                            const MaskedAttentionShape& s, float* out, std::vector<float>& probs) {
  const Runs runs = make_runs(spans, s);
  const int64_t D = s.head_dim, H = s.n_heads, nkv = s.n_kv_heads, group = H / nkv;
  const int64_t n_runs = static_cast<int64_t>(runs.start.size()) - 1;
  probs.resize(runs.off[s.nq]);
  // One task per (run, KV head): no two write the same output or probability.
  c.pool->parallel_for_dynamic(n_runs * nkv, [&](int64_t t0, int64_t t1) {
    std::vector<float> qr, kr, vt, sc, o;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / nkv, g = t % nkv, i0 = runs.start[r], rows = runs.start[r + 1] - i0, R = rows * group;
      const std::vector<int32_t> keys = span_keys(spans + 4 * i0);
      const int64_t n = static_cast<int64_t>(keys.size());
      qr.resize(R * D), kr.resize(n * D), vt.resize(D * n), sc.resize(R * n), o.resize(R * D);
      gather_queries(q, i0, rows, H, group, D, g, qr.data());
      gather_rows(k, keys, nkv, D, g, kr.data());
      c.k->matmul_f32(qr.data(), kr.data(), sc.data(), R, D, n, 0, n);  // scores [R, n]
      for (int64_t m = 0; m < R; ++m) {
        float* z = sc.data() + m * n;
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) z[j] *= s.scale, mx = std::max(mx, z[j]);
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) z[j] = std::exp(z[j] - mx), sum += z[j];
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < n; ++j) z[j] *= inv;
        const int64_t i = i0 + m / group, h = g * group + m % group;
        std::memcpy(probs.data() + runs.off[i] + h * n, z, n * sizeof(float));
      }
      gather_cols(v, keys, nkv, D, g, vt.data());
      c.k->matmul_f32(sc.data(), vt.data(), o.data(), R, n, D, 0, D);  // P V: [R, D]
      scatter_queries(o.data(), i0, rows, H, group, D, g, out);
    }
  });
}

void span_attention_backward(const OpContext& c, const float* q, const float* k, const float* v, const int32_t* spans,
                             const MaskedAttentionShape& s, const std::vector<float>& probs, const float* dout,
                             float* dq, float* dk, float* dv) {
  const Runs runs = make_runs(spans, s);
  if (static_cast<int64_t>(probs.size()) != runs.off[s.nq])
    fail("masked attention backward: ", probs.size(), " saved probabilities for spans of ", runs.off[s.nq]);
  const int64_t D = s.head_dim, H = s.n_heads, nkv = s.n_kv_heads, group = H / nkv;
  const int64_t n_runs = static_cast<int64_t>(runs.start.size()) - 1;
  // One task per KV head, its runs in row order: dk / dv rows of KV head g sum the runs in one fixed order.
  c.pool->parallel_for(nkv, [&](int64_t g0, int64_t g1) {
    std::vector<float> qr, qt, go, got, kr, kt, vr, p, pt, dp, dst, tmp;
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t j = 0; j < s.nk; ++j)
        std::fill_n(dk + (j * nkv + g) * D, D, 0.f), std::fill_n(dv + (j * nkv + g) * D, D, 0.f);
      for (int64_t r = 0; r < n_runs; ++r) {
        const int64_t i0 = runs.start[r], rows = runs.start[r + 1] - i0, R = rows * group;
        const std::vector<int32_t> keys = span_keys(spans + 4 * i0);
        const int64_t n = static_cast<int64_t>(keys.size());
        qr.resize(R * D), qt.resize(D * R), go.resize(R * D), got.resize(D * R), kr.resize(n * D), kt.resize(D * n);
        vr.resize(n * D), p.resize(R * n), pt.resize(n * R), dp.resize(R * n), dst.resize(n * R);
        tmp.resize(std::max(R, n) * D);
        gather_queries(q, i0, rows, H, group, D, g, qr.data());
        gather_queries(dout, i0, rows, H, group, D, g, go.data());
        gather_rows(v, keys, nkv, D, g, vr.data());
        for (int64_t m = 0; m < R; ++m) {
          const int64_t i = i0 + m / group, h = g * group + m % group;
          std::memcpy(p.data() + m * n, probs.data() + runs.off[i] + h * n, n * sizeof(float));
        }
        // dP = dO V^T;  dS = P (dP - sum_l P_l dP_l) * scale
        c.k->matmul_f32(go.data(), vr.data(), dp.data(), R, D, n, 0, n);
        for (int64_t m = 0; m < R; ++m) {
          const float* pm = p.data() + m * n;
          float* d = dp.data() + m * n;
          double pdp = 0;
          for (int64_t j = 0; j < n; ++j) pdp += static_cast<double>(pm[j]) * d[j];
          const float pf = static_cast<float>(pdp);
          for (int64_t j = 0; j < n; ++j) d[j] = pm[j] * (d[j] - pf) * s.scale;
        }
        // dQ = dS K
        gather_cols(k, keys, nkv, D, g, kt.data());
        c.k->matmul_f32(dp.data(), kt.data(), tmp.data(), R, n, D, 0, D);
        scatter_queries(tmp.data(), i0, rows, H, group, D, g, dq);
        // dK += dS^T Q;  dV += P^T dO
        transpose_small(dp.data(), R, n, dst.data());
        transpose_small(qr.data(), R, D, qt.data());
        const auto add_to_keys = [&](float* x) {  // x[keys[j], g] += tmp[j]
          for (int64_t j = 0; j < n; ++j) {
            float* row = x + (keys[j] * nkv + g) * D;
            for (int64_t d = 0; d < D; ++d) row[d] += tmp[j * D + d];
          }
        };
        c.k->matmul_f32(dst.data(), qt.data(), tmp.data(), n, R, D, 0, D);
        add_to_keys(dk);
        transpose_small(p.data(), R, n, pt.data());
        transpose_small(go.data(), R, D, got.data());
        c.k->matmul_f32(pt.data(), got.data(), tmp.data(), n, R, D, 0, D);
        add_to_keys(dv);
      }
    }
  });
}

}  // namespace blockspec
