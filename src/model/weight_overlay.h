// A WeightSource that serves some tensors from f32 buffers instead of the
// model's own (quantize's overrides: SmoothQuant's rescaled norms and
// linears, retrained weights to export) and everything else from a base
// source. An overridden tensor keeps the base's name and shape, loads as
// F32 and has natural format f32 (never native codes or blocks), so every
// reader of a WeightSource (calibration, Transformer loading) sees the new
// values without knowing where they came from.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/weight_source.h"

namespace blockspec {

// HF tensor name -> its values in f32, row-major in the tensor's HF shape.
using TensorOverrides = std::map<std::string, std::vector<float>>;

// Fails naming `where` and the tensor unless every override is a tensor of the model (shape_of: its shape, or
// nullopt when there is no such tensor) with as many values as the tensor has elements.
void check_overrides(const TensorOverrides& over, const std::string& where,
                     const std::function<std::optional<Shape>(const std::string&)>& shape_of);

class OverlaySource : public WeightSource {
 public:
  // Both must outlive the overlay. Fails naming the tensor if an override is
  // not a tensor of base or its size is not the tensor's element count.
  OverlaySource(const WeightSource& base, const TensorOverrides& over);

  const std::string& path() const override { return base_.path(); }
  const ModelConfig& config() const override { return base_.config(); }
  bool has(const std::string& n) const override { return base_.has(n); }
  std::vector<std::string> names() const override { return base_.names(); }
  Shape shape(const std::string& n) const override { return base_.shape(n); }
  std::string storage_type(const std::string& n) const override;
  WeightFormat natural_format(const std::string& n) const override;
  Tensor load(const std::string& n) const override;
  void load_rows(const std::string& n, int64_t r0, int64_t r1, float* out) const override;
  void release(const std::string& n) const override;
  bool has_native(const std::string& n) const override { return !over_.count(n) && base_.has_native(n); }
  void load_native(const std::string& n, int64_t r0, int64_t r1, int8_t* codes, float* scales) const override {
    base_.load_native(n, r0, r1, codes, scales);
  }
  bool native_act_int8(const std::string& n) const override { return !over_.count(n) && base_.native_act_int8(n); }
  bool has_fp_native(const std::string& n) const override { return !over_.count(n) && base_.has_fp_native(n); }
  QuantTensor fp_native(const std::string& n) const override { return base_.fp_native(n); }
  bool has_blocks(const std::string& n) const override { return !over_.count(n) && base_.has_blocks(n); }
  void load_blocks(const std::string& n, int64_t r0, int64_t r1, QBlock* out) const override {
    base_.load_blocks(n, r0, r1, out);
  }
  bool requires_kv_scales() const override { return base_.requires_kv_scales(); }

 private:
  const WeightSource& base_;
  const TensorOverrides& over_;
};

}  // namespace blockspec
