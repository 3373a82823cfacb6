#include "ptqr/ptqr_layer.h"

#include <cmath>

#include "base/error.h"
#include "kernels/quant.h"
#include "model/decoder_layer.h"
#include "model/hf_names.h"
#include "quantize/quantize.h"

namespace blockspec {

QuantSpec ptqr_spec(const WeightSource& src, int64_t group, QScheme scheme) {
  if (scheme != QScheme::kW8A8 && scheme != QScheme::kW8A16 && scheme != QScheme::kW4A16)
    fail("ptqr: --scheme ", qscheme_name(scheme), ": expected w8a8, w8a16 or w4a16 (integer G128 grids)");
  QuantizeOptions qo;
  qo.scheme = scheme;
  qo.group = group;
  const std::string name = hf::weight(hf::under(src.config().weight_prefix, hf::target_layer(0)), hf::kQ);
  return quant_spec_for(qo, scheme, src.load(name).dtype());
}

double layer_loss(const float* y_s, const float* y_t, int64_t T, int64_t H, float* dy) {
  double loss = 0;
  for (int64_t t = 0; t < T; ++t) {
    double num = 0, den = 0;
    for (int64_t j = 0; j < H; ++j) {
      const double d = static_cast<double>(y_s[t * H + j]) - y_t[t * H + j];
      num += d * d, den += static_cast<double>(y_t[t * H + j]) * y_t[t * H + j];
    }
    den = std::max(den, 1e-30);
    loss += num / den;
    if (dy)
      for (int64_t j = 0; j < H; ++j)
        dy[t * H + j] = static_cast<float>(2.0 * (static_cast<double>(y_s[t * H + j]) - y_t[t * H + j]) / (den * T));
  }
  return loss / static_cast<double>(T);
}

std::vector<float> load_f32_tensor(const WeightSource& src, const std::string& name) {
  const Shape s = src.shape(name);
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  std::vector<float> v(n);
  if (s.size() == 2) {
    src.load_rows(name, 0, s[0], v.data());
  } else {
    const Tensor t = src.load(name);
    for (int64_t i = 0; i < n; ++i)
      v[i] = t.dtype() == DType::kF32 ? t.ptr<float>()[i]
             : t.dtype() == DType::kBF16 ? bf16_to_f32(t.ptr<uint16_t>()[i])
                                         : f16_to_f32(t.ptr<uint16_t>()[i]);
  }
  return v;
}

std::vector<float> group_bias(const WeightSource& src, const std::string& p, std::initializer_list<const char*> mods) {
  bool any_bias = false;
  for (const char* m : mods) any_bias |= src.has(p + m + std::string(".bias"));
  std::vector<float> bias;
  if (!any_bias) return bias;
  for (const char* m : mods) {
    const std::string b = p + m + std::string(".bias");
    const std::vector<float> bv =
        src.has(b) ? load_f32_tensor(src, b) : std::vector<float>(src.shape(hf::weight(p, m))[0], 0.f);
    bias.insert(bias.end(), bv.begin(), bv.end());
  }
  return bias;
}

Tensor f32_view(const std::vector<float>& v) {
  return v.empty() ? Tensor() : Tensor::view(DType::kF32, {static_cast<int64_t>(v.size())}, v.data());
}

void run_layer_windows(const OpContext& ctx, const ModelConfig& c, const RopeTables& rope, const LayerWeights& lw,
                       KvDType kv, int64_t window, float* x, int64_t n) {
  if (n % window != 0) fail("ptqr: ", n, " rows are not whole windows of ", window);
  std::vector<KvCache> caches;
  std::vector<LayerSeq> seqs;
  std::vector<int64_t> pos;
  caches.reserve(n / window);
  for (int64_t w = 0; w < n / window; ++w) {
    caches.emplace_back(1, window, c.n_kv_heads, c.head_dim, kv);
    seqs.push_back({&caches.back(), window});
    for (int64_t i = 0; i < window; ++i) pos.push_back(i);
  }
  LayerScratch scratch;
  decoder_layer(ctx, c, rope, lw, 0, seqs, pos.data(), x, scratch, false);
}

namespace {

// trainable: with AdamW state and a gradient buffer (the student's groups; the teacher's are only read).
StudentGroup load_group(const WeightSource& src, const std::string& p, std::initializer_list<const char*> mods,
                        bool trainable) {
  StudentGroup g;
  for (const char* m : mods) {
    const std::string w = hf::weight(p, m);
    if (!src.has(w)) fail(src.path(), ": missing tensor \"", w, "\"");
    const Shape s = src.shape(w);
    if (g.K == 0) g.K = s[1];
    if (s[1] != g.K) fail(src.path(), ": \"", w, "\" has ", s[1], " inputs, its group ", g.K);
    StudentPart part;
    part.module = p + m;
    part.N = s[0];
    part.w = load_f32_tensor(src, w);
    if (trainable) part.opt = std::make_unique<AdamW>(part.N * g.K);
    g.N += part.N;
    g.parts.push_back(std::move(part));
  }
  g.bias = group_bias(src, p, mods);
  if (trainable) g.grad.assign(g.N * g.K, 0.f);
  return g;
}

// A group's weight as one matrix of format fmt (the teacher's bf16) from its masters.
LinearGroup linear_group_of(const OpContext& ctx, const StudentGroup& g, const QuantTensor* serving) {
  LinearGroup lg;
  if (serving) {
    lg.mats.push_back(*serving);
  } else {
    std::vector<float> w;
    w.reserve(g.N * g.K);
    for (const StudentPart& p : g.parts) w.insert(w.end(), p.w.begin(), p.w.end());
    lg.mats.push_back(make_weight(ctx, Tensor::view(DType::kF32, {g.N, g.K}, w.data()), WeightFormat::kBF16));
  }
  for (const StudentPart& p : g.parts) lg.part_rows.push_back(p.N);
  lg.rows = g.N;
  lg.bias = f32_view(g.bias);
  return lg;
}

}  // namespace

LayerWeights layer_linears(const OpContext& ctx, StudentGroup* const* groups, const QuantTensor* serving) {
  LayerWeights w;
  w.attn_qkv = linear_group_of(ctx, *groups[0], serving ? &serving[0] : nullptr);
  LinearGroup o = linear_group_of(ctx, *groups[1], serving ? &serving[1] : nullptr);
  w.attn_o = o.mats[0];
  w.attn_o_bias = o.bias;
  w.ffn_gate_up = linear_group_of(ctx, *groups[2], serving ? &serving[2] : nullptr);
  LinearGroup d = linear_group_of(ctx, *groups[3], serving ? &serving[3] : nullptr);
  w.ffn_down = d.mats[0];
  w.ffn_down_bias = d.bias;
  return w;
}

PtqrLayer::PtqrLayer(const OpContext& ctx, const ModelConfig& c, const RopeTables& rope, const WeightSource& teacher,
                     const WeightSource& student, int64_t layer, const QuantSpec& spec, KvDType kv,
                     bool train_vectors)
    : ctx_(ctx), c_(c), rope_(rope), spec_(spec), kv_(kv) {
  const std::string p = hf::under(c.weight_prefix, hf::target_layer(layer));
  attn_norm_ = load_f32_tensor(student, hf::weight(p, hf::kAttnNorm));
  ffn_norm_ = load_f32_tensor(student, hf::weight(p, hf::kFfnNorm));
  t_attn_norm_ = load_f32_tensor(teacher, hf::weight(p, hf::kAttnNorm));
  t_ffn_norm_ = load_f32_tensor(teacher, hf::weight(p, hf::kFfnNorm));
  if (c.arch == Arch::kQwen3) {
    q_norm_ = load_f32_tensor(student, hf::weight(p, hf::kQNorm));
    k_norm_ = load_f32_tensor(student, hf::weight(p, hf::kKNorm));
  }
  // The teacher's bf16 matrices are made from its own values first; then the groups hold the student's masters.
  {
    StudentGroup tq = load_group(teacher, p, {hf::kQ, hf::kK, hf::kV}, false),
                 to = load_group(teacher, p, {hf::kO}, false), tg = load_group(teacher, p, {hf::kGate, hf::kUp}, false),
                 td = load_group(teacher, p, {hf::kDown}, false);
    StudentGroup* groups[4] = {&tq, &to, &tg, &td};
    teacher_ = layer_linears(ctx_, groups, nullptr);
    teacher_bias_ = {tq.bias, to.bias, tg.bias, td.bias};
    teacher_.attn_qkv.bias = f32_view(teacher_bias_[0]);
    teacher_.attn_o_bias = f32_view(teacher_bias_[1]);
    teacher_.ffn_gate_up.bias = f32_view(teacher_bias_[2]);
    teacher_.ffn_down_bias = f32_view(teacher_bias_[3]);
  }
  teacher_.attn_norm = f32_view(t_attn_norm_), teacher_.ffn_norm = f32_view(t_ffn_norm_);
  teacher_.attn_q_norm = f32_view(q_norm_), teacher_.attn_k_norm = f32_view(k_norm_);
  qkv_ = load_group(student, p, {hf::kQ, hf::kK, hf::kV}, true);
  o_ = load_group(student, p, {hf::kO}, true);
  gu_ = load_group(student, p, {hf::kGate, hf::kUp}, true);
  down_ = load_group(student, p, {hf::kDown}, true);
  if (!train_vectors) return;
  auto add = [&](const std::string& name, float* live, const float* grad, int64_t n) {
    TrainedVector v;
    v.name = name;
    v.master.assign(live, live + n);
    v.dtype = teacher.load(name).dtype();  // what quantize writes a replaced tensor as: the original's dtype
    v.live = live;
    v.grad = grad;
    v.opt = std::make_unique<AdamW>(n);
    for (int64_t i = 0; i < n; ++i) live[i] = round_to_dtype(v.master[i], v.dtype);
    vecs_.push_back(std::move(v));
  };
  const int64_t H = c.hidden_size;
  attn_norm_grad_.assign(H, 0.f);
  ffn_norm_grad_.assign(H, 0.f);
  add(hf::weight(p, hf::kAttnNorm), attn_norm_.data(), attn_norm_grad_.data(), H);
  add(hf::weight(p, hf::kFfnNorm), ffn_norm_.data(), ffn_norm_grad_.data(), H);
  for (StudentGroup* g : {&qkv_, &o_, &gu_, &down_}) {
    if (g->bias.empty()) continue;
    g->bias_grad.assign(g->N, 0.f);
    int64_t row0 = 0;
    for (const StudentPart& part : g->parts) {
      const std::string b = part.module + ".bias";
      if (student.has(b)) add(b, g->bias.data() + row0, g->bias_grad.data() + row0, part.N);
      row0 += part.N;
    }
  }
}

void PtqrLayer::run(const LayerWeights& lw, KvDType kv, int64_t window, float* x, int64_t n) const {
  run_layer_windows(ctx_, c_, rope_, lw, kv, window, x, n);
}

void PtqrLayer::run_teacher(int64_t window, float* x, int64_t n) const { run(teacher_, KvDType::kF32, window, x, n); }

void PtqrLayer::requantize(double sigma, uint64_t seed) {
  StudentGroup* groups[4] = {&qkv_, &o_, &gu_, &down_};
  QuantTensor serving[4];
  for (int i = 0; i < 4; ++i) {
    blockspec::requantize(*groups[i], spec_, sigma, seed * 4 + i, *ctx_.pool);
    serving[i] = serving_weight(ctx_, *groups[i]);
  }
  student_ = layer_linears(ctx_, groups, serving);
  student_.attn_norm = f32_view(attn_norm_), student_.ffn_norm = f32_view(ffn_norm_);
  student_.attn_q_norm = f32_view(q_norm_), student_.attn_k_norm = f32_view(k_norm_);
}

double PtqrLayer::serving_loss(int64_t window, const float* x_s, const float* y_t, int64_t n, float* y_out) const {
  const int64_t H = c_.hidden_size;
  std::vector<float> y(x_s, x_s + n * H);
  run(student_, kv_, window, y.data(), n);
  double loss = 0;
  for (int64_t w = 0; w < n / window; ++w)
    loss += layer_loss(y.data() + w * window * H, y_t + w * window * H, window, H, nullptr);
  if (y_out) std::copy(y.begin(), y.end(), y_out);
  return loss / static_cast<double>(n / window);
}

QatLayer PtqrLayer::twin() {
  QatLayer q;
  q.c = &c_;
  q.rope = &rope_;
  q.kv = kv_;
  q.attn_norm = attn_norm_.data();
  q.ffn_norm = ffn_norm_.data();
  q.q_norm = q_norm_.empty() ? nullptr : q_norm_.data();
  q.k_norm = k_norm_.empty() ? nullptr : k_norm_.data();
  q.qkv = &qkv_, q.o = &o_, q.gu = &gu_, q.down = &down_;
  if (!vecs_.empty()) q.attn_norm_grad = attn_norm_grad_.data(), q.ffn_norm_grad = ffn_norm_grad_.data();
  q.act_int8 = ptqr_acts_int8(spec_);
  return q;
}

double PtqrLayer::train_step(int64_t T, const float* x_s, const float* y_t, double lr, int64_t t,
                             const AdamWOptions& ao, double lr_vectors) {
  const int64_t H = c_.hidden_size;
  std::vector<float> y(x_s, x_s + T * H), dy(T * H), y_twin(T * H);
  run(student_, kv_, T, y.data(), T);
  const double loss = layer_loss(y.data(), y_t, T, H, dy.data());
  QatLayer q = twin();
  QatSaved saved;
  qat_forward(ctx_, q, x_s, T, y_twin.data(), saved);
  for (StudentGroup* g : {&qkv_, &o_, &gu_, &down_}) {
    std::fill(g->grad.begin(), g->grad.end(), 0.f);
    std::fill(g->bias_grad.begin(), g->bias_grad.end(), 0.f);
  }
  std::fill(attn_norm_grad_.begin(), attn_norm_grad_.end(), 0.f);
  std::fill(ffn_norm_grad_.begin(), ffn_norm_grad_.end(), 0.f);
  qat_backward(ctx_, q, saved, dy.data(), nullptr);
  for (TrainedVector& v : vecs_) {
    v.opt->step(v.master.data(), v.grad, t, lr_vectors, ao);
    for (size_t i = 0; i < v.master.size(); ++i) v.live[i] = round_to_dtype(v.master[i], v.dtype);
  }
  for (StudentGroup* g : {&qkv_, &o_, &gu_, &down_}) {
    int64_t row0 = 0;
    for (StudentPart& p : g->parts) {
      p.opt->step(p.w.data(), g->grad.data() + row0 * g->K, t, lr, ao, *ctx_.pool);
      row0 += p.N;
    }
  }
  return loss;
}

std::vector<std::vector<float>> PtqrLayer::masters() const {
  std::vector<std::vector<float>> m;
  for (const StudentGroup* g : {&qkv_, &o_, &gu_, &down_})
    for (const StudentPart& p : g->parts) m.push_back(p.w);
  for (const TrainedVector& v : vecs_) m.push_back(v.master);
  return m;
}

void PtqrLayer::set_masters(const std::vector<std::vector<float>>& m) {
  size_t i = 0;
  auto take = [&](std::vector<float>& dst) {
    if (i >= m.size() || m[i].size() != dst.size()) fail("ptqr: set_masters: master ", i, " does not match this layer");
    dst = m[i++];
  };
  for (StudentGroup* g : {&qkv_, &o_, &gu_, &down_})
    for (StudentPart& p : g->parts) take(p.w);
  for (TrainedVector& v : vecs_) {
    take(v.master);
    for (size_t j = 0; j < v.master.size(); ++j) v.live[j] = round_to_dtype(v.master[j], v.dtype);
  }
  if (i != m.size()) fail("ptqr: set_masters: ", m.size(), " masters for a layer of ", i);
}

std::vector<std::pair<std::string, std::vector<float>>> PtqrLayer::export_vectors() const {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const TrainedVector& v : vecs_) out.emplace_back(v.name, std::vector<float>(v.live, v.live + v.master.size()));
  return out;
}

std::vector<std::tuple<std::string, QuantWeight, double>> PtqrLayer::export_codes() const {
  std::vector<std::tuple<std::string, QuantWeight, double>> out;
  for (const StudentGroup* g : {&qkv_, &o_, &gu_, &down_})
    for (size_t i = 0; i < g->parts.size(); ++i)
      out.emplace_back(g->parts[i].module, g->parts[i].qw, relative_dequant_error(*g, i));
  return out;
}

}  // namespace blockspec
