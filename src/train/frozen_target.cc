#include "train/frozen_target.h"

#include "kernels/quant.h"
#include "kernels/quant_rows.h"
#include "train/gemm.h"

namespace blockspec {

std::unique_ptr<FrozenTargetCopy> freeze_target(const Transformer& model, ThreadPool& pool, bool bf16_head) {
  auto f = std::make_unique<FrozenTargetCopy>();
  const ModelWeights& w = model.weights();
  const Tensor head = dequantize_weight(w.lm_head);  // [V, H] f32
  const int64_t V = head.dim(0), H = head.dim(1);
  f->lm_head.assign(head.ptr<float>(), head.ptr<float>() + V * H);
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
