#include "train/frozen_target.h"

#include "base/error.h"
#include "kernels/quant.h"
#include "kernels/quant_rows.h"
#include "train/gemm.h"

namespace blockspec {

std::unique_ptr<FrozenTargetCopy> freeze_target(const Transformer& model, ThreadPool& pool, bool bf16_head,
                                                const std::vector<int32_t>& vocab) {
  auto f = std::make_unique<FrozenTargetCopy>();
  const ModelWeights& w = model.weights();
  const Tensor head = dequantize_weight(w.lm_head);  // [Vt, H] f32
  const int64_t H = head.dim(1), V = vocab.empty() ? head.dim(0) : static_cast<int64_t>(vocab.size());
  if (vocab.empty()) {
    f->lm_head.assign(head.ptr<float>(), head.ptr<float>() + V * H);
  } else {
    f->lm_head.resize(V * H);
    for (int64_t i = 0; i < V; ++i) {
      if (vocab[i] < 0 || vocab[i] >= head.dim(0)) fail("freeze_target: draft vocabulary id ", vocab[i], " outside the head");
      std::copy(head.ptr<float>() + vocab[i] * H, head.ptr<float>() + (vocab[i] + 1) * H, f->lm_head.data() + i * H);
    }
  }
  f->lm_head_t.resize(V * H);
  const KernelTable kt = select_kernels("ref");  // transpose only uses the pool
  transpose(OpContext{&kt, &pool}, f->lm_head.data(), V, H, f->lm_head_t.data());
  f->view.lm_head = f->lm_head.data();
  f->view.lm_head_t = f->lm_head_t.data();
  if (bf16_head) {
    f->lm_head_bf16.resize(V * H), f->lm_head_t_bf16.resize(V * H);
    for (int64_t i = 0; i < V * H; ++i)
      f->lm_head_bf16[i] = f32_to_bf16(f->lm_head[i]), f->lm_head_t_bf16[i] = f32_to_bf16(f->lm_head_t[i]);
    f->view.lm_head_bf16 = f->lm_head_bf16.data();
    f->view.lm_head_t_bf16 = f->lm_head_t_bf16.data();
  }
  const QuantTensor* embd = &w.tok_embd;
  f->view.embed = [embd](const int32_t* ids, int64_t n, float* out) { dequantize_rows(*embd, ids, n, out); };
  return f;
}

}  // namespace blockspec
