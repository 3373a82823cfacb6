// See weight_overlay.h.
#include "model/weight_overlay.h"

#include <algorithm>

#include "base/error.h"

namespace blockspec {

void check_overrides(const TensorOverrides& over, const std::string& where,
                     const std::function<std::optional<Shape>(const std::string&)>& shape_of) {
  for (const auto& [n, v] : over) {
    const std::optional<Shape> s = shape_of(n);
    if (!s) fail(where, ": override \"", n, "\" is not a tensor of the model (expected an HF tensor name)");
    const int64_t want = shape_numel(*s);
    if (static_cast<int64_t>(v.size()) != want)
      fail(where, ": override \"", n, "\" has ", v.size(), " values; the tensor has ", want,
           " (the original's shape, row-major)");
  }
}

OverlaySource::OverlaySource(const WeightSource& base, const TensorOverrides& over) : base_(base), over_(over) {
  check_overrides(over_, base_.path(), [&](const std::string& n) -> std::optional<Shape> {
    if (!base_.has(n)) return std::nullopt;
    return base_.shape(n);
  });
}

std::string OverlaySource::storage_type(const std::string& n) const {
  return over_.count(n) ? "F32 (override)" : base_.storage_type(n);
}

WeightFormat OverlaySource::natural_format(const std::string& n) const {
  return over_.count(n) ? WeightFormat::kF32 : base_.natural_format(n);
}

Tensor OverlaySource::load(const std::string& n) const {
  const auto it = over_.find(n);
  if (it == over_.end()) return base_.load(n);
  Tensor t(DType::kF32, base_.shape(n));  // a copy: what loads it may outlive the overrides
  std::copy(it->second.begin(), it->second.end(), t.mutable_ptr<float>());
  return t;
}

void OverlaySource::load_rows(const std::string& n, int64_t r0, int64_t r1, float* out) const {
  const auto it = over_.find(n);
  if (it == over_.end()) return base_.load_rows(n, r0, r1, out);
  const Shape s = base_.shape(n);
  BS_ASSERT(s.size() == 2 && r0 >= 0 && r0 <= r1 && r1 <= s[0]);
  std::copy(it->second.begin() + r0 * s[1], it->second.begin() + r1 * s[1], out);
}

void OverlaySource::release(const std::string& n) const {
  if (!over_.count(n)) base_.release(n);
}

}  // namespace blockspec
