#include "train/frozen_target.h"

#include "kernels/quant.h"
#include "kernels/quant_rows.h"
#include "train/gemm.h"

namespace blockspec {

std::unique_ptr<FrozenTargetCopy> freeze_target(const Transformer& model, ThreadPool& pool) {
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
  const QuantTensor* embd = &w.tok_embd;
  f->view.embed = [embd](const int32_t* ids, int64_t n, float* out) { dequantize_rows(*embd, ids, n, out); };
  return f;
}

}  // namespace blockspec
