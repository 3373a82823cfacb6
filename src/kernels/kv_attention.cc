// attention_causal over a compressed KV cache. The loop is attend_heads of
// ops.cc with every K/V row access going through the dtype's row kernels, so
// per head the operations and their order are those of attention_causal on
// the dequantized cache (the only difference is the stored values).
#include "kernels/kv_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tensor/dtype.h"
#include "kernels/attention_common.h"

namespace blockspec {

namespace {

// Rows of the tokens [j0, j1) that share one page (or the whole contiguous
// buffer): token j, kv head h is row (j - first) * n_kv_heads + h.
struct RowAddr {
  const uint8_t* codes;
  const float* scales;
  int64_t code_stride, scale_stride;  // per (token, kv head) row
  bool per_row_scales;
  int64_t first, j1;  // token of row 0; first token past this run
  const void* code(int64_t row) const { return codes + row * code_stride; }
  const float* scale(int64_t row) const { return per_row_scales ? scales + row * scale_stride : scales; }
};

// The run of rows from token j0 to the end of its page (or n_ctx): paged
// views are looked up once per page, not per row.
RowAddr rows_at(const KvView& v, int64_t d, int64_t j0, int64_t n_ctx) {
  const int64_t spr = kv_scales_per_row(v.dtype, d);
  RowAddr a{static_cast<const uint8_t*>(v.codes), v.scales, d * kv_code_bytes(v.dtype), spr, spr > 0, 0, n_ctx};
  if (v.pages == nullptr) return a;
  const uint8_t* base = v.pages[j0 / v.page_tokens];
  a.first = j0 - j0 % v.page_tokens;
  a.j1 = std::min(n_ctx, a.first + v.page_tokens);
  a.codes = base + v.code_offset;
  if (a.per_row_scales) a.scales = reinterpret_cast<const float*>(base + v.scale_offset);
  return a;
}

void attend_heads_kv(const OpContext& ctx, const float* q, const KvView& k, const KvView& v, const AttentionShape& s,
                     int64_t t, int64_t h0, int64_t h1, std::vector<float>& scores, float* out) {
  const int64_t D = s.head_dim, kvh = h0 / (s.n_heads / s.n_kv_heads);
  const int64_t n_h = h1 - h0;
  const int64_t n_ctx = s.start + t + 1;  // causal: keys 0..start+t
  const KvRowKernels& kk = ctx.k->kv.row[static_cast<int>(k.dtype)];
  const KvRowKernels& vk = ctx.k->kv.row[static_cast<int>(v.dtype)];
  scores.resize(n_h * n_ctx);  // [n_h, n_ctx]
  std::vector<float> mx(n_h, -INFINITY);
  // One call per page run: each K / V row is read once for all n_h heads.
  const float* qh = q + (t * s.n_heads + h0) * D;  // [n_h, D]
  float* oh = out + (t * s.n_heads + h0) * D;       // [n_h, D]
  for (int64_t j0 = 0; j0 < n_ctx;) {
    const RowAddr ka = rows_at(k, D, j0, n_ctx);
    const int64_t r0 = (j0 - ka.first) * s.n_kv_heads + kvh;
    kk.dot_rows(qh, n_h, ka.code(r0), ka.code_stride * s.n_kv_heads, ka.scale(r0),
                ka.per_row_scales ? ka.scale_stride * s.n_kv_heads : 0, ka.j1 - j0, D, scores.data() + j0, n_ctx);
    // The running max in a register: through mx[i] (which may alias scores) each element waited for the last
    // one's store, the larger part of attention's time outside the row kernels in 8-row verification.
    for (int64_t i = 0; i < n_h; ++i) {
      float* sc = scores.data() + i * n_ctx;
      float m = mx[i];
      for (int64_t j = j0; j < ka.j1; ++j) {
        const float d = attention_score(sc[j], s);
        sc[j] = d;
        m = std::max(m, d);
      }
      mx[i] = m;
    }
    j0 = ka.j1;
  }
  softmax_rows(*ctx.k, scores.data(), mx.data(), n_h, n_ctx, s.round_bf16);
  std::memset(oh, 0, n_h * D * sizeof(float));
  for (int64_t j0 = 0; j0 < n_ctx;) {
    const RowAddr va = rows_at(v, D, j0, n_ctx);
    const int64_t r0 = (j0 - va.first) * s.n_kv_heads + kvh;
    vk.axpy_rows(scores.data() + j0, n_ctx, n_h, va.code(r0), va.code_stride * s.n_kv_heads, va.scale(r0),
                 va.per_row_scales ? va.scale_stride * s.n_kv_heads : 0, va.j1 - j0, oh, D);
    j0 = va.j1;
  }
  if (s.round_bf16)
    for (int64_t i = 0; i < n_h; ++i) round_to_bf16(out + (t * s.n_heads + h0 + i) * D, D);
}

}  // namespace

void attention_causal_kv(const OpContext& ctx, const float* q, const KvView& k, const KvView& v,
                         const AttentionShape& s, float* out) {
  attention_causal_kv_batch(ctx, {KvAttentionJob{q, k, v, s, out}});
}

void attention_causal_kv_batch(const OpContext& ctx, const std::vector<KvAttentionJob>& jobs) {
  // Work items are (job, token, KV head) when there are enough of them to
  // keep every thread busy; else (job, token, query head), giving up K/V
  // sharing for parallelism (one decode token of a model with one KV head).
  // The grouping does not change any result. Items go to whichever thread is
  // free, the longest (latest token) of each job first, so causal rows of
  // growing length and sequences of different contexts balance.
  int64_t kv_items = 0;
  for (const auto& j : jobs) kv_items += j.s.n_tokens * j.s.n_kv_heads;
  const bool by_kv = kv_items >= ctx.pool->n_threads();
  std::vector<int64_t> first(jobs.size() + 1, 0);  // first item of each job
  for (size_t i = 0; i < jobs.size(); ++i) {
    const AttentionShape& s = jobs[i].s;
    first[i + 1] = first[i] + s.n_tokens * (by_kv ? s.n_kv_heads : s.n_heads);
  }
  ctx.pool->parallel_for_dynamic(first.back(), [&](int64_t b, int64_t e) {
    std::vector<float> scores;  // [heads of the item, context]
    for (int64_t it = b; it < e; ++it) {
      const size_t ji = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), it) - first.begin()) - 1;
      const KvAttentionJob& j = jobs[ji];
      const int64_t per_item = by_kv ? j.s.n_heads / j.s.n_kv_heads : 1;
      const int64_t per_token = j.s.n_heads / per_item;
      const int64_t local = first[ji + 1] - 1 - it;  // latest token first
      const int64_t t = local / per_token, h0 = local % per_token * per_item;
      attend_heads_kv(ctx, j.q, j.k, j.v, j.s, t, h0, h0 + per_item, scores, j.out);
    }
  });
}

}  // namespace blockspec
